"""Priced remedies for a pool that cannot hold the peak (shared by the layer-3 rules)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.demand import slots
from kvdiag.analyzer.model.quantities.growth import NO_LENGTHS, grown_lengths, growth
from kvdiag.analyzer.model.quantities.load_picture import points_by_replica
from kvdiag.analyzer.model.quantities.vocabulary import Vocabulary, vocabulary
from kvdiag.analyzer.model.quantities.workload import Lengths, Pool, fmt_tokens
from kvdiag.domain import dtypes, kvmath
from kvdiag.domain.records.diagnosis import Remedy
from kvdiag.domain.units import MIB


def saturation_remedies(
    ctx: Incident,
    lens: Lengths | None,
    pool: Pool | None,
    max_running: int,
    max_concurrent: int,
    replica: str | None = None,
) -> list[Remedy]:
    """max_num_seqs that fits, replicas for the peak, fp8 KV, and a bigger pool, priced."""
    out: list[Remedy] = []
    words = vocabulary(ctx, replica)
    if lens is not None and pool is not None:
        size = sizing(ctx, lens, replica)
        out += _fit_remedies(words, size, pool, max_running, max_concurrent)
        out += _pool_remedies(ctx, words, size, pool, max_concurrent, replica)
    out.append(
        Remedy(
            f"cap {words.name('max_model_len')} and max_tokens; route long and short traffic apart",
            "plan from the longest allowed request, not the average: one long request holds "
            "the blocks of many short ones",
        )
    )
    return out


@dataclass(frozen=True, slots=True)
class Sizing:
    """The request length a remedy is priced at: the longest one the evidence allows, so
    that what it promises holds whichever requests run together; and the mean, to say
    what pricing at the mean would have promised."""

    tokens: float  # the longest a request grows to
    label: str  # "longest" | "max_model_len" | "mean" (nothing bounds a request)
    which: str  # what that length is and where it comes from, for a rationale
    mean: float  # the mean request's growth (prompt + max_tokens, else + generated)


def sizing(ctx: Incident, lens: Lengths, replica: str | None) -> Sizing:
    """Price at the longest request the evidence allows (support/growth.py); at the mean
    only when nothing bounds a request's length."""
    grown = grown_lengths(ctx, replica)
    if grown is None or not math.isfinite(grown[0].longest):
        return Sizing(lens.peak, "mean", "no longest known", lens.peak)
    spread, grows, _ = grown
    if spread.source == NO_LENGTHS:
        return Sizing(spread.longest, "max_model_len", "no request lengths", lens.peak)
    return Sizing(spread.longest, "longest", f"{grows}, {spread.source}", lens.peak)


def _fit_remedies(
    words: Vocabulary, size: Sizing, pool: Pool, max_running: int, max_concurrent: int
) -> list[Remedy]:
    per = size.tokens
    fit = max(1, pool.fit(per))
    blocks = (
        f" ({slots(per, pool.block_size) / pool.block_size:.0f} blocks of {pool.block_size})"
        if pool.block_size and pool.block_size > 1
        else ""
    )
    at_mean = max(1, pool.fit(size.mean))
    unlike = (
        f"; priced at the mean request ({fmt_tokens(size.mean)} tokens) {at_mean} would fit, "
        "which holds only while the requests running stay near the mean"
        if at_mean != fit
        else ""
    )
    out = [
        Remedy(
            words.flag("max_num_seqs", fit),
            f"the pool holds {fmt_tokens(pool.usable)} usable tokens; priced at the "
            f"{size.label} length ({size.which}): {fmt_tokens(per)} tokens{blocks}, so {fit} "
            f"fit without {words.word('preemption')} whichever requests run together (up to "
            f"{max_running} ran at once){unlike}",
        )
    ]
    if max_concurrent > fit:
        replicas = math.ceil(max_concurrent / fit)
        out.append(
            Remedy(
                f"serve the peak with {replicas} replicas of this pool (data parallel)",
                f"peak demand {max_concurrent} requests at {fit} per replica (each up to "
                f"{fmt_tokens(per)} tokens, the {size.label} length)",
            )
        )
    return out


def _pool_remedies(
    ctx: Incident,
    words: Vocabulary,
    size: Sizing,
    pool: Pool,
    max_concurrent: int,
    replica: str | None,
) -> list[Remedy]:
    out: list[Remedy] = []
    shrink = dtypes.fp8_shrink_factor(ctx.fact_value("kv_cache_dtype"))
    if shrink:
        per = size.tokens
        now, then = pool.fit(per), int((shrink * pool.usable) // slots(per, pool.block_size))
        out.append(
            Remedy(
                words.phrase("fp8_kv"),
                f"{shrink_words(shrink)} bytes per token: the same memory holds "
                f"{fmt_tokens(shrink * pool.tokens)} tokens instead of "
                f"{fmt_tokens(pool.tokens)}, {then} requests at the {size.label} length "
                f"({fmt_tokens(per)} tokens: {size.which}) instead of {now}",
            )
        )
    grow = Remedy(
        words.phrase("grow_pool"),
        "only where the card has free memory the pool cannot reach (see layer 1)",
    )
    out.append(_explicit_size(ctx, words, size, pool, max_concurrent, replica) or grow)
    return out


def _peak_slots(
    ctx: Incident, size: Sizing, pool: Pool, max_concurrent: int, replica: str | None
) -> tuple[float, str]:
    """The most slots the peak's requests (running + waiting) may hold, and how it is known:
    the requests in flight at that moment where the client's log places them, else the
    peak's count of requests at the longest length."""
    parts = points_by_replica(ctx)
    only = next(iter(parts.values())) if len(parts) == 1 else None
    part = parts.get(replica) if replica is not None else only
    grown = growth(ctx, part, replica, pool, with_waiting=True) if part is not None else None
    if grown is not None and grown.at is not None:
        d = grown.demand
        return d.high, f"{d.requests} requests at {grown.at:%H:%M:%S} ({grown.basis()})"
    held = max_concurrent * slots(size.tokens, pool.block_size)
    return held, f"{max_concurrent} requests x {fmt_tokens(size.tokens)} tokens ({size.label})"


def _explicit_size(
    ctx: Incident,
    words: Vocabulary,
    size: Sizing,
    pool: Pool,
    max_concurrent: int,
    replica: str | None,
) -> Remedy | None:
    """The explicit pool size the peak needs, in the unit the engine's flag takes."""
    explicit = ctx.config(words.explicit_pool.key)
    if explicit is None or not max_concurrent:
        return None
    held, peak = _peak_slots(ctx, size, pool, max_concurrent, replica)
    need_tokens = held + (pool.block_size or 0)
    if words.explicit_pool.unit == "tokens":
        return Remedy(
            f"{words.explicit_pool.flag} {math.ceil(need_tokens)}",
            f"the pool was set explicitly to {fmt_tokens(float(explicit['value']))} tokens; "
            f"{peak} need {fmt_tokens(need_tokens)}",
        )
    per_token = ctx.fact_value("kv_bytes_per_token")
    if not per_token:
        return None
    need = kvmath.pool_bytes_for_tokens(need_tokens, float(per_token))
    return Remedy(
        f"{words.explicit_pool.flag} {math.ceil(need / MIB)}M",
        f"the pool was set explicitly to {float(explicit['value']) / MIB:,.1f} MiB; "
        f"{peak} at {per_token:,} bytes per token need {need / MIB:,.1f} MiB",
    )


def shrink_words(factor: int) -> str:
    """What an fp8 KV cache does to bytes per token, `factor` times fewer."""
    return {2: "halves", 4: "quarters"}.get(factor, f"divides by {factor}")
