"""Priced remedies for a pool that cannot hold the peak (shared by the layer-3 rules)."""

from __future__ import annotations

import math

from kvdiag.analyzer.diagnosis import Remedy
from kvdiag.domain import dtypes, kvmath
from kvdiag.domain.units import MIB
from kvdiag.rules.base import RuleContext
from kvdiag.rules.support.demand import slots
from kvdiag.rules.support.vocabulary import Vocabulary, vocabulary
from kvdiag.rules.support.workload import Lengths, Pool, fmt_tokens


def saturation_remedies(
    ctx: RuleContext,
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
        out += _fit_remedies(words, lens, pool, max_running, max_concurrent)
        out += _pool_remedies(ctx, words, lens, pool, max_concurrent)
    out.append(
        Remedy(
            f"cap {words.name('max_model_len')} and max_tokens; route long and short traffic apart",
            "plan from the longest allowed request, not the average: one long request holds "
            "the blocks of many short ones",
        )
    )
    return out


def _fit_remedies(
    words: Vocabulary, lens: Lengths, pool: Pool, max_running: int, max_concurrent: int
) -> list[Remedy]:
    per = lens.peak
    fit = max(1, pool.fit(per))
    blocks = (
        f" ({slots(per, pool.block_size) / pool.block_size:.0f} blocks of {pool.block_size})"
        if pool.block_size and pool.block_size > 1
        else ""
    )
    grow = "max_tokens" if lens.max_tokens else "what they generated"
    out = [
        Remedy(
            words.flag("max_num_seqs", fit),
            f"the pool holds {fmt_tokens(pool.usable)} usable tokens; a request grows to "
            f"{fmt_tokens(lens.prompt)} prompt + {fmt_tokens(per - lens.prompt)} ({grow}) = "
            f"{fmt_tokens(per)} tokens{blocks}, so {fit} fit without {words.word('preemption')} "
            f"(up to {max_running} ran at once)",
        )
    ]
    if max_concurrent > fit:
        replicas = math.ceil(max_concurrent / fit)
        out.append(
            Remedy(
                f"serve the peak with {replicas} replicas of this pool (data parallel)",
                f"peak demand {max_concurrent} requests x {fmt_tokens(per)} tokens = "
                f"{fmt_tokens(max_concurrent * per)} tokens, "
                f"{max_concurrent * per / pool.usable:.1f}x the pool",
            )
        )
    return out


def _pool_remedies(
    ctx: RuleContext, words: Vocabulary, lens: Lengths, pool: Pool, max_concurrent: int
) -> list[Remedy]:
    out: list[Remedy] = []
    shrink = dtypes.fp8_shrink_factor(ctx.fact_value("kv_cache_dtype"))
    if shrink:
        per = lens.p95_total or lens.peak
        now, then = pool.fit(per), int((shrink * pool.usable) // slots(per, pool.block_size))
        which = "p95" if lens.p95_total else "mean"
        out.append(
            Remedy(
                words.phrase("fp8_kv"),
                f"{shrink_words(shrink)} bytes per token: the same memory holds "
                f"{fmt_tokens(shrink * pool.tokens)} tokens instead of "
                f"{fmt_tokens(pool.tokens)}, {then} requests at the {which} "
                f"length ({fmt_tokens(per)} tokens) instead of {now}",
            )
        )
    grow = Remedy(
        words.phrase("grow_pool"),
        "only where the card has free memory the pool cannot reach (see layer 1)",
    )
    out.append(_explicit_size(ctx, words, lens, pool, max_concurrent) or grow)
    return out


def _explicit_size(
    ctx: RuleContext, words: Vocabulary, lens: Lengths, pool: Pool, max_concurrent: int
) -> Remedy | None:
    """The explicit pool size the peak needs, in the unit the engine's flag takes."""
    explicit = ctx.config(words.explicit_pool.key)
    if explicit is None or not max_concurrent:
        return None
    need_tokens = max_concurrent * slots(lens.peak, pool.block_size) + (pool.block_size or 0)
    peak = f"{max_concurrent} requests x {fmt_tokens(lens.peak)} tokens"
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
