"""KV302: requests wait while the KV pool has room; name what limits admission."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import polars as pl

from kvdiag.analyzer.diagnosis import Evidence, Finding, IncidentClass, Remedy, RuledOut, Severity
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.episodes import Episode, best_source, episodes
from kvdiag.rules.support.load_picture import (
    aggregated_note,
    points_by_replica,
    preemptions,
    usage_evidence,
    waiting_evidence,
)
from kvdiag.rules.support.prefill_rate import steady_prefill
from kvdiag.rules.support.queries import col_max, gauge
from kvdiag.rules.support.queue_cap import CapReading, pool_during, read_caps
from kvdiag.rules.support.rejections import Rejections, rejecting_replicas, rejections
from kvdiag.rules.support.vocabulary import vocabulary
from kvdiag.rules.support.workload import Lengths, fmt_tokens, lengths, pct, pool


@dataclass
class _Limiter:
    kind: str  # prefill-bound | max_num_seqs | queue cap | deferred | unknown
    text: str
    evidence: list[Evidence] = field(default_factory=list)
    remedies: list[Remedy] = field(default_factory=list)


class AdmissionLimited(Rule):
    """Requests wait while the KV pool has room: something other than KV limits admission.

    A queue episode (consecutive observations with `min_waiting` or more waiting) of at least
    `min_points` observations whose median KV usage stays under `usage_room`, with no
    preemption, is not KV-bound. The rule then names the limiter it can see: the per-step
    token budget (prefill-bound: prompt throughput on a plateau, at least
    `prompt_share` of all tokens processed), max_num_seqs (running pinned at the configured
    cap), a queue cap (rejections, 429/503), deferred requests (`waiting_by_reason`), or
    says it cannot tell (LoRA slots and other limits leave no trace in the inputs).
    vLLM 0.20+ tells deferred requests (`reason="deferred"`, the stats line's `Deferred: N
    reqs`) from those waiting for capacity: a queue of deferred requests only is not held
    by the pool however full it is, and its limiter is the deferral.

    Requests refused with 429/503 are admission at work even when nothing waited (a cap
    on requests in flight turns them away before they queue) and when no load was
    observed at all (an access log alone): with a queue cap in evidence and the pool not
    full around them, the finding names the cap, the count and the first and last
    rejection. Without a cap in evidence it says what is known and claims nothing.
    """

    code = "KV302"
    name = "peak.admission_limited"
    layer = 3
    severity = Severity.WARNING
    implies = IncidentClass.ADMISSION_LIMITED
    requires_any = ("metric_samples", "log_stats", "log_http", "client_requests")
    thresholds = (
        Threshold("min_waiting", 1, "requests", "waiting requests that count as a queue"),
        Threshold("min_points", 5, "observations", "a queue episode must last this many"),
        Threshold("usage_room", 0.80, "ratio", "median KV usage under this leaves the pool room"),
        Threshold(
            "prompt_share", 0.90, "ratio", "prompt share of throughput that is prefill-bound"
        ),
        Threshold("plateau", 0.05, "ratio", "stats lines within this of the top throughput"),
        Threshold("pinned", 0.80, "ratio", "share of a queue with running at its maximum: a cap"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | RuledOut]:
        replicas: dict[str, pl.DataFrame | None] = dict(points_by_replica(ctx))
        # Replicas seen only refusing requests (an access log without load points).
        replicas |= {r: None for r in rejecting_replicas(ctx, known=replicas)}
        for name, part in replicas.items():
            yield from self._replica(ctx, name, part, len(replicas) > 1)

    def _replica(
        self, ctx: RuleContext, name: str, part: pl.DataFrame | None, multi: bool
    ) -> Iterator[Finding | RuledOut]:
        scope = name if multi else None
        refused = rejections(ctx, scope)
        found = [] if part is None else _queue_episodes(ctx, _all_waiting(part))
        if not found:
            if refused:
                yield from self._rejected(ctx, refused, part, scope)
            elif part is not None and not col_max(part, "waiting") + col_max(part, "deferred"):
                yield ctx.rule_out("no request waited")
            return
        # A queue of deferred requests only is not held by the pool, however full it is.
        roomy = [
            e for e in found if e.median_usage < ctx.threshold("usage_room") or _deferred_only(e)
        ]
        pre = preemptions(ctx, scope).count
        if not roomy or pre:
            top = max(e.median_usage for e in found)
            words = vocabulary(ctx, scope)
            why = words.count(pre) if pre else f"median KV usage {pct(top)} while queued"
            overflow = f"; its {refused.count} rejected requests too" if refused else ""
            yield ctx.rule_out(f"the queue coincided with a full pool ({why}): KV-bound{overflow}")
            return
        assert part is not None
        worst = max(roomy, key=lambda e: e.max_waiting)
        lens = lengths(ctx, scope)
        limiter = _limiter(ctx, worst, part, lens, scope, refused)
        usage = f"KV usage at most {pct(worst.peak_usage)} (median {pct(worst.median_usage)})"
        if _deferred_only(worst):
            title = (
                f"Requests waited for something other than KV capacity: up to "
                f"{worst.max_waiting} waiting, all deferred, none for capacity, with {usage}; "
                f"the deferred queue was set apart from KV pressure; {limiter.kind}: {limiter.text}"
            )
        else:
            title = (
                f"Requests waited while the KV pool had room: up to {worst.max_waiting} waiting "
                f"with {usage}; {limiter.kind}: {limiter.text}"
            )
        title += aggregated_note(ctx, part, scope)
        row = worst.row_of_max("waiting")
        # The episode counts every waiting request, deferred ones too.
        counted = "num_requests_waiting (capacity + deferred)" if row["deferred"] else None
        ev = [waiting_evidence(ctx, row, counted), usage_evidence(ctx, worst.row_of_max("usage"))]
        ev += limiter.evidence + _stats_line(ctx, worst, scope)
        yield ctx.finding(title, ev, limiter.remedies, replica=scope)

    def _rejected(
        self, ctx: RuleContext, refused: Rejections, part: pl.DataFrame | None, scope: str | None
    ) -> Iterator[Finding | RuledOut]:
        """Requests were refused and none queued long enough for an episode."""
        during = pool_during(ctx, part, refused)
        pre = preemptions(ctx, scope).count
        full = during.known and (during.median or 0.0) >= ctx.threshold("usage_room")
        if full or pre:
            words = vocabulary(ctx, scope)
            why = words.count(pre) if pre else f"median KV usage {pct(during.median or 0.0)}"
            yield ctx.rule_out(
                f"{refused.count} requests were rejected while the pool was full ({why}): "
                "KV-bound, not an admission limit"
            )
            return
        reading = read_caps(ctx, refused, during, scope)
        # Without a cap in evidence the 503s are stated, not read as admission_limited.
        title = f"Admission refused work: {reading.text}" if reading.cap_named else reading.text
        severity = None if reading.cap_named else Severity.INFO
        yield ctx.finding(
            title,
            reading.evidence,
            reading.remedies,
            severity=severity,
            replica=scope,
            claimed=reading.cap_named,
        )


_Probe = Callable[[RuleContext, Episode, Lengths | None, str | None], "_Limiter | None"]


def _all_waiting(part: pl.DataFrame) -> pl.DataFrame:
    """The load points with every waiting request, deferred ones too (vLLM 0.20+ tells them
    apart: `waiting` is the capacity queue, kept as `capacity`). An admission limit is any
    queue; only the capacity part of it can be KV-bound."""
    return part.with_columns(
        pl.col("waiting").alias("capacity"),
        (pl.col("waiting").fill_null(0) + pl.col("deferred").fill_null(0)).alias("waiting"),
    )


def _deferred_only(ep: Episode) -> bool:
    """Every request of the episode waited deferred, none for capacity."""
    return not col_max(ep.rows, "capacity") and bool(col_max(ep.rows, "deferred"))


def _queue_episodes(ctx: RuleContext, part: pl.DataFrame) -> list[Episode]:
    """Queue episodes long enough to count, from the finest source."""
    return [
        e
        for e in episodes(best_source(part), ctx.threshold("min_waiting"))
        if e.length >= ctx.threshold("min_points")
    ]


def _stats_line(ctx: RuleContext, ep: Episode, scope: str | None) -> list[Evidence]:
    """The engine's own stats line with the deepest queue of the episode, as corroboration."""
    where = "waiting > 0 AND ts BETWEEN ? AND ?" + (" AND replica = ?" if scope else "")
    params: list[object] = [ep.start, ep.end] + ([scope] if scope else [])
    lines = ctx.sql(
        f"SELECT * FROM log_stats WHERE {where} ORDER BY waiting DESC, ts LIMIT 1", params
    )
    if lines.is_empty():
        return []
    row = lines.row(0, named=True)
    value = f"{row['waiting']} waiting, {row['kv_usage_pct']}% KV"
    return [ctx.evidence(row, "waiting_with_kv_usage", value)]


def _limiter(
    ctx: RuleContext,
    ep: Episode,
    part: pl.DataFrame,
    lens: Lengths | None,
    scope: str | None,
    refused: Rejections,
) -> _Limiter:
    # The binding limit first: a queue cap or deferral is often a consequence of it.
    probes: tuple[_Probe, ...] = (_max_num_seqs, _prefill_bound, _concurrency_cap, _deferred)
    if _deferred_only(ep):  # nothing waited for capacity: no cap or budget held the queue
        probes = (_deferred,)
    for probe in probes:
        found = probe(ctx, ep, lens, scope)
        if found is not None:
            return _with_rejections(ctx, found, part, refused, scope)
    if refused:
        reading = read_caps(ctx, refused, pool_during(ctx, part, refused), scope)
        return _Limiter("queue cap", reading.text, reading.evidence, reading.remedies)
    return _Limiter(
        "limiter not identified",
        f"no {vocabulary(ctx, scope).name('max_num_seqs')} cap reached, no token-budget "
        "plateau, rejection or deferral in the inputs (LoRA slots and scheduler policies leave "
        "no trace there)",
    )


def _deferred(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> _Limiter | None:
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
        return _Limiter(
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
    return _Limiter(
        "deferred",
        f"up to {row['deferred']} requests waited deferred ({why})",
        [ctx.evidence(row, "deferred", row["deferred"])],
    )


def _with_rejections(
    ctx: RuleContext,
    limiter: _Limiter,
    part: pl.DataFrame,
    refused: Rejections,
    scope: str | None,
) -> _Limiter:
    """The binding limiter, and the requests a queue cap refused behind it."""
    if not refused:
        return limiter
    reading: CapReading = read_caps(ctx, refused, pool_during(ctx, part, refused), scope)
    return _Limiter(
        limiter.kind,
        f"{limiter.text}; behind it, {reading.text}",
        limiter.evidence + reading.evidence,
        limiter.remedies + reading.remedies,
    )


def _max_num_seqs(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> _Limiter | None:
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
    return _Limiter(
        cap_name,
        f"running requests pinned at {cap_name} = {cap} while the pool had room",
        [ctx.evidence(cap_row, "max_num_seqs", cap)],
        remedies,
    )


def _concurrency_cap(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> _Limiter | None:
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
    return _Limiter(
        "concurrency cap",
        f"running requests held at {top} in {pinned} of {ep.rows.height} observations while "
        f"the pool had room: {words.name('max_num_seqs')} (not in the inputs) or a LoRA slot "
        "limit",
        [usage_evidence(ctx, row, "kv_cache_usage_at_cap")],
        remedies,
    )


def _prefill_bound(
    ctx: RuleContext, ep: Episode, lens: Lengths | None, scope: str | None
) -> _Limiter | None:
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
    return _Limiter("prefill-bound", text, [evidence], remedies)


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
