"""KV302: requests wait while the KV pool has room; name what limits admission."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import polars as pl

from kvdiag.analyzer.model.quantities.episodes import Episode, best_source, episodes
from kvdiag.analyzer.model.quantities.load_picture import (
    aggregated_note,
    points_by_replica,
    preemptions,
    usage_evidence,
    waiting_evidence,
)
from kvdiag.analyzer.model.quantities.queue_cap import pool_during, read_caps
from kvdiag.analyzer.model.quantities.rejections import Rejections, rejecting_replicas, rejections
from kvdiag.analyzer.model.quantities.vocabulary import vocabulary
from kvdiag.analyzer.model.quantities.workload import lengths, pct
from kvdiag.analyzer.model.queries import col_max
from kvdiag.domain.records.diagnosis import Evidence, Finding, IncidentClass, RuledOut, Severity
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.admission_limiters import deferred_only, find_limiter


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
            e for e in found if e.median_usage < ctx.threshold("usage_room") or deferred_only(e)
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
        limiter = find_limiter(ctx, worst, part, lens, scope, refused)
        usage = f"KV usage at most {pct(worst.peak_usage)} (median {pct(worst.median_usage)})"
        if deferred_only(worst):
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


def _all_waiting(part: pl.DataFrame) -> pl.DataFrame:
    """The load points with every waiting request, deferred ones too (vLLM 0.20+ tells them
    apart: `waiting` is the capacity queue, kept as `capacity`). An admission limit is any
    queue; only the capacity part of it can be KV-bound."""
    return part.with_columns(
        pl.col("waiting").alias("capacity"),
        (pl.col("waiting").fill_null(0) + pl.col("deferred").fill_null(0)).alias("waiting"),
    )


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
