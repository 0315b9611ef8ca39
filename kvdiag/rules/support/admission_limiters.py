"""What limits admission when requests wait and the KV pool has room (KV302's limiters).

Each probe looks for one limiter in the inputs: a max_num_seqs cap reached, the per-step token
budget spent on prefill (a throughput plateau in the stats lines, or a prompt counter rising on
a straight line), running pinned at one level (a cap no config names), or deferred requests.
The binding limit is looked for first: a queue cap or deferral is often a consequence of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from kvdiag.analyzer.model.quantities.episodes import Episode
from kvdiag.analyzer.model.quantities.load_picture import usage_evidence
from kvdiag.analyzer.model.quantities.prefill_rate import steady_prefill
from kvdiag.analyzer.model.quantities.queue_cap import CapReading, pool_during, read_caps
from kvdiag.analyzer.model.quantities.rejections import Rejections
from kvdiag.analyzer.model.quantities.vocabulary import vocabulary
from kvdiag.analyzer.model.quantities.workload import Lengths, fmt_tokens, pool
from kvdiag.analyzer.model.queries import col_max, gauge
from kvdiag.domain.records.diagnosis import Evidence, Remedy
from kvdiag.rules.base import RuleContext


@dataclass
class Limiter:
    """A limiter found: its kind, what it says, its evidence and remedies."""

    kind: str  # prefill-bound | max_num_seqs | queue cap | deferred | unknown
    text: str
    evidence: list[Evidence] = field(default_factory=list)
    remedies: list[Remedy] = field(default_factory=list)


_Probe = Callable[[RuleContext, Episode, Lengths | None, str | None], "Limiter | None"]


def deferred_only(ep: Episode) -> bool:
    """Every request of the episode waited deferred, none for capacity."""
    return not col_max(ep.rows, "capacity") and bool(col_max(ep.rows, "deferred"))


def find_limiter(
    ctx: RuleContext,
    ep: Episode,
    part: pl.DataFrame,
    lens: Lengths | None,
    scope: str | None,
    refused: Rejections,
) -> Limiter:
    # The binding limit first: a queue cap or deferral is often a consequence of it.
    probes: tuple[_Probe, ...] = (_max_num_seqs, _prefill_bound, _concurrency_cap, _deferred)
    if deferred_only(ep):  # nothing waited for capacity: no cap or budget held the queue
        probes = (_deferred,)
    for probe in probes:
        found = probe(ctx, ep, lens, scope)
        if found is not None:
            return _with_rejections(ctx, found, part, refused, scope)
    if refused:
        reading = read_caps(ctx, refused, pool_during(ctx, part, refused), scope)
        return Limiter("queue cap", reading.text, reading.evidence, reading.remedies)
    return Limiter(
        "limiter not identified",
        f"no {vocabulary(ctx, scope).name('max_num_seqs')} cap reached, no token-budget "
        "plateau, rejection or deferral in the inputs (LoRA slots and scheduler policies leave "
        "no trace there)",
    )


def _deferred(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> Limiter | None:
    rows = gauge(ctx, "num_requests_waiting_by_reason", reason="deferred")
    if scope is not None and rows.height:
        rows = rows.filter(pl.col("replica") == scope)
    rows = rows.filter(pl.col("value") > 0)
    why = (
        "held back by a transient constraint: LoRA budget, KV transfer or blocked status, not "
        "by capacity"
    )
    if rows.height:
        top = rows.sort("value", descending=True).row(0, named=True)
        return Limiter(
            "deferred",
            f"up to {int(top['value'])} requests waited with reason=deferred ({why})",
            [ctx.evidence(top, "num_requests_waiting_by_reason{deferred}", top["value"])],
        )
    # Without scrapes, the stats line's `Deferred: N reqs` (0.20+) says the same.
    where = "deferred > 0" + (" AND replica = ?" if scope else "")
    lines = ctx.sql(
        f"SELECT * FROM log_stats WHERE {where} ORDER BY deferred DESC, ts LIMIT 1",
        [scope] if scope else [],
    )
    if lines.is_empty():
        return None
    row = lines.row(0, named=True)
    return Limiter(
        "deferred",
        f"up to {row['deferred']} requests waited deferred ({why})",
        [ctx.evidence(row, "deferred", row["deferred"])],
    )


def _with_rejections(
    ctx: RuleContext,
    limiter: Limiter,
    part: pl.DataFrame,
    refused: Rejections,
    scope: str | None,
) -> Limiter:
    """The binding limiter, and the requests a queue cap refused behind it."""
    if not refused:
        return limiter
    reading: CapReading = read_caps(ctx, refused, pool_during(ctx, part, refused), scope)
    return Limiter(
        limiter.kind,
        f"{limiter.text}; behind it, {reading.text}",
        limiter.evidence + reading.evidence,
        limiter.remedies + reading.remedies,
    )


def _max_num_seqs(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> Limiter | None:
    cap_row = ctx.config("max_num_seqs", scope)
    if cap_row is None:
        return None
    cap = int(float(cap_row["value"]))
    if ep.max_running < cap:
        return None
    words = vocabulary(ctx, scope)
    remedies = []
    size = pool(ctx, scope)
    if size is not None and lens is not None:
        fit = size.fit(lens.peak)
        if fit > cap:
            remedies.append(
                Remedy(
                    words.flag("max_num_seqs", fit),
                    f"the pool holds {fit} requests of {fmt_tokens(lens.peak)} tokens "
                    f"(prompt + max_tokens); {cap} leaves the rest of it idle",
                )
            )
    cap_name = words.name("max_num_seqs")
    return Limiter(
        cap_name,
        f"running requests pinned at {cap_name} = {cap} while the pool had room",
        [ctx.evidence(cap_row, "max_num_seqs", cap)],
        remedies,
    )


def _concurrency_cap(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> Limiter | None:
    """Running held at one level for most of the queue: a cap, even when no config says which."""
    top = ep.max_running
    pinned = ep.rows.filter(pl.col("running") == top).height
    if top < 2 or pinned < ctx.threshold("pinned") * ep.rows.height:
        return None
    remedies = []
    words = vocabulary(ctx, scope)
    size = pool(ctx, scope)
    if size is not None and lens is not None and size.fit(lens.peak) > top:
        fit = size.fit(lens.peak)
        remedies.append(
            Remedy(
                words.flag("max_num_seqs", f"{fit} (if that is the cap)"),
                f"the pool holds {fit} requests of {fmt_tokens(lens.peak)} tokens "
                f"(prompt + max_tokens); {top} running leaves the rest of it idle",
            )
        )
    row = ep.row_of_max("running")
    return Limiter(
        "concurrency cap",
        f"running requests held at {top} in {pinned} of {ep.rows.height} observations while "
        f"the pool had room: {words.name('max_num_seqs')} (not in the inputs) or a LoRA slot "
        "limit",
        [usage_evidence(ctx, row, "kv_cache_usage_at_cap")],
        remedies,
    )


def _prefill_bound(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> Limiter | None:
    where = "prompt_tps IS NOT NULL AND ts BETWEEN ? AND ?"
    params: list[object] = [ep.start, ep.end]
    if scope is not None:
        where += " AND replica = ?"
        params.append(scope)
    lines = ctx.sql(f"SELECT * FROM log_stats WHERE {where} ORDER BY ts, source_line", params)
    found = _plateau_in_lines(ctx, lines) or _steady_counter(ctx, ep, scope)
    if found is None:
        return None
    top, text, evidence = found
    words = vocabulary(ctx, scope)
    remedies = [
        Remedy(
            f"raise {words.flag('max_num_batched_tokens')} (only where compute is idle) "
            "or add replicas",
            f"prefill runs at {top:,.0f} tokens/s; more KV does not shorten this queue",
        )
    ]
    if lens is not None and lens.prompt:
        rate = top / lens.prompt
        text += f"; with {fmt_tokens(lens.prompt)}-token prompts that is {rate:.2f} requests/s"
        remedies.append(
            Remedy(
                words.phrase("cut_prompts"),
                f"each request costs {fmt_tokens(lens.prompt)} prompt tokens of prefill; "
                f"halving it doubles the {rate:.2f} requests/s this engine admits",
            )
        )
    return Limiter("prefill-bound", text, [evidence], remedies)


def _plateau_in_lines(ctx: RuleContext, lines: pl.DataFrame) -> tuple[float, str, Evidence] | None:
    """Most stats lines of the queue within `plateau` of the top prompt throughput."""
    if lines.height < 3:
        return None
    top = col_max(lines, "prompt_tps")
    gen = col_max(lines, "gen_tps")
    near = lines.filter(pl.col("prompt_tps") >= top * (1 - ctx.threshold("plateau")))
    share = top / (top + gen) if top + gen else 0.0
    if top <= 0 or share < ctx.threshold("prompt_share") or near.height * 2 < lines.height:
        return None
    text = (
        f"prompt throughput on a plateau at {top:,.0f} tokens/s ({near.height} of {lines.height} "
        f"stats lines within {ctx.threshold('plateau'):.0%} of it) against {gen:,.1f} tokens/s "
        "generated: the per-step token budget is spent on prefill"
    )
    row = near.row(0, named=True)
    return top, text, ctx.evidence(row, "prompt_tps", row["prompt_tps"])


def _steady_counter(
    ctx: RuleContext, ep: Episode, scope: str | None
) -> tuple[float, str, Evidence] | None:
    """The prompt-token counter rising on a straight line through the queue."""
    steady = steady_prefill(ctx, ep.start, ep.end, scope)
    if steady is None:
        return None
    rate, gen = steady.prompt_tps, steady.gen_tps
    if rate / (rate + gen) < ctx.threshold("prompt_share"):
        return None
    text = (
        f"prompt tokens went in at a steady {rate:,.0f} tokens/s while requests waited "
        f"({steady.samples} counter scrapes on a straight line, r² {steady.r2:.2f}) against "
        f"{gen:,.1f} tokens/s generated: the per-step token budget is spent on prefill"
    )
    return rate, text, ctx.evidence(steady.row, "prompt_tokens_rate", round(rate, 1))
