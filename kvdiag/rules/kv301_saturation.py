"""KV301: requests wait or are preempted because the KV pool is full."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import timedelta

import polars as pl

from kvdiag.analyzer.model.quantities.demand import trend
from kvdiag.analyzer.model.quantities.episodes import best_source, by_time
from kvdiag.analyzer.model.quantities.growth import Growth, growth
from kvdiag.analyzer.model.quantities.load_picture import (
    aggregated_note,
    point_evidence,
    points_by_replica,
    preemptions,
    pressure,
    usage_evidence,
    waiting_evidence,
)
from kvdiag.analyzer.model.quantities.peak import saturation_remedies
from kvdiag.analyzer.model.quantities.pool_full import (
    event_times,
    points_extent,
    replicas_with_statements,
    statement_phrase,
    statements,
)
from kvdiag.analyzer.model.quantities.vocabulary import vocabulary
from kvdiag.analyzer.model.quantities.workload import fmt_tokens, lengths, pct, pool
from kvdiag.analyzer.model.queries import col_max, first_max
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Evidence,
    Extent,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.replica_load import ReplicaLoad, saturation_rows


class KvSaturation(Rule):
    """Requests wait or are preempted while the KV pool is full (genuine exhaustion).

    Evidence: KV usage at or above `usage_full` while `min_waiting` or more requests wait
    for capacity (metrics scrapes or the engine's stats lines; vLLM 0.20+ deferred requests
    are set apart); preemptions (counter, stats lines, v0
    warnings) with a pool that reached `usage_full`. Either fires the rule as an error.
    Without a queue yet, it fires as a warning when the running requests' worst case
    (prompt + max_tokens each) provably exceeds the pool: even the fewest slots the length
    evidence allows them (support/growth.py), not their mean; bounds that straddle the pool
    warn of nothing, and the rule-out says so. It also warns when usage climbs steadily
    towards full: a line fitted over the `trend_window` seconds before a peak of at least
    `usage_warn` that reaches 100 % within `horizon` seconds (time to exhaustion).
    Without any usage or queue line (a pasted fragment), the engine's own statements that the
    pool was full decide alone: preemption warnings and SGLang retractions fire it as a warning
    (the pool was full at those moments, but nothing shows for how long or what waited), and
    SGLang's `Decode out of memory` RuntimeError as an error (a step found no KV slots at
    all). The findings carry their extent (moments and seconds of a full pool), which the
    verdict's confidence weighs.
    Layer 3 comparisons: peak demand (with its bounds) against the pool, waiting, preemptions,
    queue time and TTFT p99. Remedies are priced: max_num_seqs that fits, replicas, fp8 KV, a
    bigger pool.
    """

    code = "KV301"
    name = "peak.kv_saturation"
    layer = 3
    severity = Severity.ERROR
    implies = IncidentClass.SATURATION
    requires_any = ("metric_samples", "log_stats", "log_preemptions", "log_capacity_errors")
    thresholds = (
        Threshold("usage_full", 0.90, "ratio", "KV usage at or above this counts as a full pool"),
        Threshold("min_waiting", 1, "requests", "waiting requests that count as a queue"),
        Threshold("usage_warn", 0.80, "ratio", "a climb is only projected from this usage up"),
        Threshold("trend_window", 120, "s", "seconds of usage before the peak fitted for a climb"),
        Threshold("horizon", 600, "s", "a projected exhaustion within this many seconds warns"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        replicas = points_by_replica(ctx)
        unpictured = [r for r in replicas_with_statements(ctx) if r not in replicas]
        multi = len(replicas) + len(unpictured) > 1
        for name, part in replicas.items():
            rep = self._gather(ctx, name, part, multi=multi)
            yield from saturation_rows(ctx, rep, multi=multi)
            yield from self._decide(ctx, rep, multi=multi)
        for name in unpictured:
            yield from _from_statements(ctx, name if multi else None)

    def _gather(self, ctx: RuleContext, name: str, part: pl.DataFrame, multi: bool) -> ReplicaLoad:
        full, min_w = ctx.threshold("usage_full"), ctx.threshold("min_waiting")
        hot = part.filter((pl.col("usage") >= full) & (pl.col("waiting") >= min_w))
        concurrent = part.select((pl.col("running") + pl.col("waiting")).max()).item()
        scope = name if multi else None
        size = pool(ctx, scope)
        return ReplicaLoad(
            name=name,
            points=part,
            hot=hot,
            pre=preemptions(ctx, scope),
            pressure=pressure(ctx, scope),
            lens=lengths(ctx, scope),
            pool=size,
            peak_usage=col_max(part, "usage"),
            max_waiting=int(col_max(part, "waiting")),
            max_running=int(col_max(part, "running")),
            max_concurrent=int(concurrent or 0),
            words=vocabulary(ctx, scope),
            queued=growth(ctx, part, scope, size, with_waiting=True) if size else None,
            running=growth(ctx, part, scope, size) if size else None,
        )

    def _decide(
        self, ctx: RuleContext, rep: ReplicaLoad, multi: bool
    ) -> Iterator[Finding | RuledOut]:
        full = ctx.threshold("usage_full")
        replica = rep.name if multi else None
        pushed_out = rep.pre.count or rep.pressure.swapped or rep.pressure.rejected
        if rep.hot.height or (pushed_out and rep.peak_usage >= full):
            title = _full_title(rep) + _fill_time(rep, full)
            title += aggregated_note(ctx, rep.points, replica)
            ev = _full_evidence(ctx, rep)
            finding = ctx.finding(
                title,
                ev,
                saturation_remedies(
                    ctx, rep.lens, rep.pool, rep.max_running, rep.max_concurrent, replica
                ),
                replica=replica,
            )
            yield replace(finding, extent=_full_extent(rep, full))
            return
        warning = self._risk(ctx, rep)
        if warning is not None:
            title, ev = warning
            finding = ctx.finding(
                title,
                ev,
                saturation_remedies(
                    ctx, rep.lens, rep.pool, rep.max_running, rep.max_concurrent, replica
                ),
                severity=Severity.WARNING,
                replica=replica,
            )
            # A climb toward a level the requests' bounds may or may not reach: said, not
            # claimed (the bounds straddle the pool; see _straddle).
            yield replace(finding, claimed=not _climb_unbounded_either_way(rep, title))
            return
        yield ctx.rule_out(_not_full_reason(ctx, rep) + _straddle(rep))

    def _risk(self, ctx: RuleContext, rep: ReplicaLoad) -> tuple[str, list[Evidence]] | None:
        """A warning without a queue: even the fewest slots the running requests may grow
        to (prompt + max_tokens) exceed the pool, or usage climbs steadily."""
        peak_row = first_max(rep.points, "usage")
        assert peak_row is not None
        peak_ev = usage_evidence(ctx, peak_row)
        grown = rep.running
        if grown is not None and grown.demand.exceeds and grown.grows == "prompt + max_tokens":
            d = grown.demand
            return (
                f"Current usage understates the risk: {_held(grown)} grow to at least "
                f"{fmt_tokens(d.low)} tokens = {d.ratio(d.low):.1f}x the pool of "
                f"{fmt_tokens(d.pool)} ({grown.basis()}; usage peaked at {rep.peak_usage:.0%})",
                [peak_ev],
            )
        if _bounded(rep):
            return None  # a climb toward a level the requests' full lengths cannot reach
        climb = _climb(ctx, rep, peak_row)
        if climb is None:
            return None
        seconds, slope = climb
        return (
            f"KV usage climbing {slope * 6000:.1f} points/min to {rep.peak_usage:.0%}: at that "
            f"rate the pool is full in {seconds:.0f} s",
            [peak_ev],
        )


def _bounded(rep: ReplicaLoad) -> bool:
    """Whether every request running or waiting fits at its full length (prompt +
    max_tokens, from request lengths): usage can climb no higher than that, whatever its
    slope, so a climb is no warning."""
    grown = rep.queued
    return (
        grown is not None
        and grown.lengths_known
        and grown.grows == "prompt + max_tokens"
        and grown.demand.fits
    )


def _climb_unbounded_either_way(rep: ReplicaLoad, title: str) -> bool:
    """Whether a climb warning rests on the slope alone: the requests' bounds straddle the
    pool (they may fit at full length, or not), or nothing bounds them at all."""
    grown = rep.queued
    return title.startswith("KV usage climbing") and (grown is None or grown.demand.straddles)


def _held(grown: Growth) -> str:
    """How many requests the bound counts, and at which observation."""
    n = grown.demand.requests
    when = f" at {grown.at:%H:%M:%S}" if grown.at is not None else ""
    return f"{n} running {'requests' if n != 1 else 'request'}{when}"


def _straddle(rep: ReplicaLoad) -> str:
    """The rule-out's caveat when the running requests' growth may or may not pass the
    pool: no warning is claimed on it (an info finding would list saturation among the
    verdict's classes), but the reader learns the risk is open. Silent where only
    max_model_len bounds a request (a range that wide says nothing a reader can act on)."""
    grown = rep.running
    if grown is None or not grown.lengths_known or not grown.demand.straddles:
        return ""
    d = grown.demand
    return (
        f"; but {_held(grown)} could grow to {fmt_tokens(d.low)} to {fmt_tokens(d.high)} "
        f"tokens against the pool of {fmt_tokens(d.pool)} ({grown.basis()}): the bounds "
        "straddle the pool, so an overflow as they grow is neither shown nor ruled out"
    )


def _from_statements(ctx: RuleContext, replica: str | None) -> Iterator[Finding]:
    """Saturation from the engine's own statements alone: no usage or queue line exists."""
    said = statements(ctx, replica)
    if not said.said:
        return
    words = vocabulary(ctx, replica)
    title = (
        f"KV pool {'exhausted' if said.crashed else 'full'} by the engine's own account: "
        f"{statement_phrase(said, words)}; no usage or queue lines show how long it lasted"
    )
    remedies = [
        Remedy(
            f"lower {words.flag('max_num_seqs')}",
            "fewer requests at once hold fewer KV slots; size it from the pool and the request "
            "lengths, which these lines do not give",
        ),
        Remedy(
            words.phrase("grow_pool"),
            "only where the card has free memory the pool cannot reach",
        ),
        *saturation_remedies(ctx, None, None, 0, 0, replica),
    ]
    severity = Severity.ERROR if said.crashed else Severity.WARNING
    finding = ctx.finding(title, said.evidence(ctx), remedies, severity=severity, replica=replica)
    yield replace(finding, extent=said.extent())


def _full_extent(rep: ReplicaLoad, full: float) -> Extent:
    """The moments of a full pool with a queue; without a queue, of a full pool and the
    events that pushed requests out."""
    if rep.hot.height:
        return points_extent(best_source(rep.hot))
    full_rows = best_source(rep.points.filter(pl.col("usage") >= full))
    return points_extent(full_rows, event_times(rep.pre))


def _climb(
    ctx: RuleContext, rep: ReplicaLoad, peak_row: dict[str, object]
) -> tuple[float, float] | None:
    """(seconds to full, slope per second) of a steady climb ending at the peak, or None."""
    if rep.peak_usage < ctx.threshold("usage_warn") or peak_row["ts"] is None:
        return None
    src = rep.points.filter(pl.col("origin") == peak_row["origin"]).drop_nulls("ts")
    end = peak_row["ts"]
    start = end - timedelta(seconds=ctx.threshold("trend_window"))  # type: ignore[operator]
    window = src.filter((pl.col("ts") >= start) & (pl.col("ts") <= end))
    if window.height < 5:
        return None
    t0 = window["ts"][0]
    pts = [
        ((ts - t0).total_seconds(), float(u)) for ts, u in window.select("ts", "usage").iter_rows()
    ]
    line = trend(pts)
    if line is None or line.r2 < 0.8:
        return None
    seconds = line.seconds_to(1.0)
    if seconds is None or seconds > ctx.threshold("horizon"):
        return None
    return seconds, line.slope


def _full_title(rep: ReplicaLoad) -> str:
    pushed = rep.words.count(rep.pre.count)
    # vLLM 0.20+ tells deferred requests apart: only the capacity queue is counted here.
    deferred = int(col_max(rep.points, "deferred"))
    apart = f" for capacity (up to {deferred} deferred set apart)" if deferred else ""
    title = (
        f"KV pool full while requests waited: usage peaked at {rep.peak_usage:.0%}, "
        f"up to {rep.max_waiting} waiting{apart}, {pushed}"
        if rep.max_waiting
        else f"KV pool full: usage peaked at {rep.peak_usage:.0%} and pushed requests out, {pushed}"
    )
    if rep.pressure.swapped:
        title += f", up to {rep.pressure.swapped} swapped to CPU"
    if rep.pressure.rejected:
        title += f", {rep.pressure.rejected} rejected"
    queued = rep.queued
    if queued is not None and queued.demand.exceeds:
        d = queued.demand
        least = "" if round(d.low) == round(d.high) else "at least "
        title += (
            f"; peak demand: {d.requests} requests running or waiting hold {least}"
            f"{fmt_tokens(d.low)} tokens = {d.ratio(d.low):.1f}x the pool of "
            f"{fmt_tokens(d.pool)} ({queued.basis()})"
        )
    return title


def _fill_time(rep: ReplicaLoad, full: float) -> str:
    """How fast the pool filled: from the last low point before it first reached full."""
    src = by_time(best_source(rep.points).select("ts", "usage")).drop_nulls("ts")
    hits = src.with_row_index().filter(pl.col("usage") >= full)
    if hits.is_empty():
        return ""
    first = hits.row(0, named=True)
    before = src.slice(0, first["index"]).filter(pl.col("usage") < full / 2)
    if before.is_empty():
        return ""
    low = before.row(before.height - 1, named=True)
    seconds = (first["ts"] - low["ts"]).total_seconds()
    return f"; usage went from {pct(low['usage'])} to {pct(first['usage'])} in {seconds:.0f} s"


def _full_evidence(ctx: RuleContext, rep: ReplicaLoad) -> list[Evidence]:
    """The most telling rows first: evidence is capped per finding."""
    ev: list[Evidence] = []
    scraped = rep.points.filter(pl.col("origin") == "metrics")
    if (row := first_max(scraped, "usage")) is not None:
        ev.append(usage_evidence(ctx, row))
    hot_scraped = rep.hot.filter(pl.col("origin") == "metrics")
    if (row := first_max(hot_scraped, "waiting")) is not None:
        ev += [waiting_evidence(ctx, row), usage_evidence(ctx, row)]
    hot_lines = rep.hot.filter(pl.col("origin") == "log")
    for row in (
        hot_lines.row(0, named=True) if hot_lines.height else None,
        first_max(hot_lines, "waiting"),
    ):
        if row is not None:
            value = f"{row['usage']:.1%} / {int(row['waiting'])} waiting"
            ev.append(point_evidence(ctx, row, "kv_usage_with_waiting", value))
    ev += list(rep.pre.evidence) + list(rep.pressure.evidence)
    if hot_scraped.height:
        ev.append(usage_evidence(ctx, hot_scraped.row(0, named=True)))
    return ev


def _not_full_reason(ctx: RuleContext, rep: ReplicaLoad) -> str:
    min_w = ctx.threshold("min_waiting")
    queued = rep.points.filter(pl.col("waiting") >= min_w)
    if queued.height:
        top = col_max(queued, "usage")
        return (
            f"waiting up to {rep.max_waiting} with KV usage at most {top:.0%} meanwhile: "
            "not KV-bound"
        )
    shown = pct(rep.peak_usage)
    # vLLM 0.20+: deferred requests wait for something else than capacity (load_picture).
    deferred = int(col_max(rep.points, "deferred"))
    nothing = (
        f"nothing waited for capacity ({deferred} deferred set apart: not KV pressure)"
        if deferred
        else "nothing waited"
    )
    return (
        f"{nothing} and nothing was {rep.words.word('preempted')} (peak KV usage {shown})"
        if not rep.pre.count
        else f"{rep.words.count(rep.pre.count)} but KV usage peaked at {shown}"
    )
