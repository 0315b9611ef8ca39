"""KV301: requests wait or are preempted because the KV pool is full."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import polars as pl

from kvdiag.analyzer.diagnosis import (
    Comparison,
    Evidence,
    Finding,
    IncidentClass,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.demand import Demand, trend
from kvdiag.rules.support.episodes import best_source, by_time
from kvdiag.rules.support.load_picture import (
    Preemptions,
    Pressure,
    point_evidence,
    points_by_replica,
    preemptions,
    pressure,
    usage_evidence,
    waiting_cited,
    waiting_evidence,
)
from kvdiag.rules.support.peak import saturation_remedies
from kvdiag.rules.support.queries import col_max, first_max, histogram_quantile
from kvdiag.rules.support.vocabulary import Vocabulary, vocabulary
from kvdiag.rules.support.workload import Lengths, Pool, fmt_request, fmt_tokens, lengths, pct, pool


@dataclass
class _Replica:
    """What one replica's load says, gathered before deciding."""

    name: str
    points: pl.DataFrame
    hot: pl.DataFrame  # points with a full pool and a queue at once
    pre: Preemptions
    pressure: Pressure
    lens: Lengths | None
    pool: Pool | None
    peak_usage: float
    max_waiting: int
    max_running: int
    max_concurrent: int  # running + waiting at the same moment
    words: Vocabulary
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def queued_demand(self) -> Demand | None:
        if self.lens is None or self.pool is None:
            return None
        return Demand(self.max_concurrent, self.pool.slots(self.lens.peak), self.pool.usable)

    @property
    def running_demand(self) -> Demand | None:
        """What the running requests grow to: provable only when max_tokens is known."""
        if self.lens is None or self.pool is None or not self.lens.max_tokens:
            return None
        return Demand(self.max_running, self.pool.slots(self.lens.peak), self.pool.usable)


class KvSaturation(Rule):
    """Requests wait or are preempted while the KV pool is full (genuine exhaustion).

    Evidence: KV usage at or above `usage_full` while `min_waiting` or more requests wait
    (metrics scrapes or the engine's stats lines); preemptions (counter, stats lines, v0
    warnings) with a pool that reached `usage_full`. Either fires the rule as an error.
    Without a queue yet, it fires as a warning when the running requests' worst case
    (prompt + max_tokens each) provably exceeds the pool, or when usage climbs steadily
    towards full: a line fitted over the `trend_window` seconds before a peak of at least
    `usage_warn` that reaches 100 % within `horizon` seconds (time to exhaustion).
    Layer 3 comparisons: peak demand against the pool, waiting, preemptions, queue time and
    TTFT p99. Remedies are priced: max_num_seqs that fits, replicas, fp8 KV, a bigger pool.
    """

    code = "KV301"
    name = "peak.kv_saturation"
    layer = 3
    severity = Severity.ERROR
    implies = IncidentClass.SATURATION
    requires_any = ("metric_samples", "log_stats")
    thresholds = (
        Threshold("usage_full", 0.90, "ratio", "KV usage at or above this counts as a full pool"),
        Threshold("min_waiting", 1, "requests", "waiting requests that count as a queue"),
        Threshold("usage_warn", 0.80, "ratio", "a climb is only projected from this usage up"),
        Threshold("trend_window", 120, "s", "seconds of usage before the peak fitted for a climb"),
        Threshold("horizon", 600, "s", "a projected exhaustion within this many seconds warns"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        replicas = points_by_replica(ctx)
        for name, part in replicas.items():
            rep = self._gather(ctx, name, part, multi=len(replicas) > 1)
            yield from _comparisons(ctx, rep, multi=len(replicas) > 1)
            yield from self._decide(ctx, rep, multi=len(replicas) > 1)

    def _gather(self, ctx: RuleContext, name: str, part: pl.DataFrame, multi: bool) -> _Replica:
        full, min_w = ctx.threshold("usage_full"), ctx.threshold("min_waiting")
        hot = part.filter((pl.col("usage") >= full) & (pl.col("waiting") >= min_w))
        concurrent = part.select((pl.col("running") + pl.col("waiting")).max()).item()
        scope = name if multi else None
        return _Replica(
            name=name,
            points=part,
            hot=hot,
            pre=preemptions(ctx, scope),
            pressure=pressure(ctx, scope),
            lens=lengths(ctx, scope),
            pool=pool(ctx, scope),
            peak_usage=col_max(part, "usage"),
            max_waiting=int(col_max(part, "waiting")),
            max_running=int(col_max(part, "running")),
            max_concurrent=int(concurrent or 0),
            words=vocabulary(ctx, scope),
        )

    def _decide(self, ctx: RuleContext, rep: _Replica, multi: bool) -> Iterator[Finding | RuledOut]:
        full = ctx.threshold("usage_full")
        replica = rep.name if multi else None
        pushed_out = rep.pre.count or rep.pressure.swapped or rep.pressure.rejected
        if rep.hot.height or (pushed_out and rep.peak_usage >= full):
            title = _full_title(rep) + _fill_time(rep, full)
            ev = _full_evidence(ctx, rep)
            yield ctx.finding(
                title,
                ev,
                saturation_remedies(
                    ctx, rep.lens, rep.pool, rep.max_running, rep.max_concurrent, replica
                ),
                replica=replica,
            )
            return
        warning = self._risk(ctx, rep)
        if warning is not None:
            title, ev = warning
            yield ctx.finding(
                title,
                ev,
                saturation_remedies(
                    ctx, rep.lens, rep.pool, rep.max_running, rep.max_concurrent, replica
                ),
                severity=Severity.WARNING,
                replica=replica,
            )
            return
        yield ctx.rule_out(_not_full_reason(ctx, rep))

    def _risk(self, ctx: RuleContext, rep: _Replica) -> tuple[str, list[Evidence]] | None:
        """A warning without a queue: provable worst case over the pool, or a steady climb."""
        peak_row = first_max(rep.points, "usage")
        assert peak_row is not None
        peak_ev = usage_evidence(ctx, peak_row)
        worst = rep.running_demand
        if worst is not None and worst.exceeds and rep.lens is not None:
            return (
                f"Current usage understates the risk: {rep.max_running} running requests grow "
                f"to {fmt_request(rep.lens.peak, worst.per_request)} each (prompt + max_tokens), "
                f"{fmt_tokens(worst.total)} tokens = {worst.ratio:.1f}x the pool of "
                f"{fmt_tokens(worst.pool)} (usage peaked at {rep.peak_usage:.0%})",
                [peak_ev],
            )
        climb = _climb(ctx, rep, peak_row)
        if climb is None:
            return None
        seconds, slope = climb
        return (
            f"KV usage climbing {slope * 6000:.1f} points/min to {rep.peak_usage:.0%}: at that "
            f"rate the pool is full in {seconds:.0f} s",
            [peak_ev],
        )


def _climb(
    ctx: RuleContext, rep: _Replica, peak_row: dict[str, object]
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


def _full_title(rep: _Replica) -> str:
    pushed = rep.words.count(rep.pre.count)
    title = (
        f"KV pool full while requests waited: usage peaked at {rep.peak_usage:.0%}, "
        f"up to {rep.max_waiting} waiting, {pushed}"
        if rep.max_waiting
        else f"KV pool full: usage peaked at {rep.peak_usage:.0%} and pushed requests out, {pushed}"
    )
    if rep.pressure.swapped:
        title += f", up to {rep.pressure.swapped} swapped to CPU"
    if rep.pressure.rejected:
        title += f", {rep.pressure.rejected} rejected"
    demand = rep.queued_demand
    if demand is not None and demand.exceeds and rep.lens is not None:
        each = fmt_request(rep.lens.peak, demand.per_request)
        title += (
            f"; peak demand {rep.max_concurrent} requests x {each} = {demand.ratio:.1f}x the "
            f"pool of {fmt_tokens(demand.pool)}"
        )
    return title


def _fill_time(rep: _Replica, full: float) -> str:
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


def _full_evidence(ctx: RuleContext, rep: _Replica) -> list[Evidence]:
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


def _not_full_reason(ctx: RuleContext, rep: _Replica) -> str:
    min_w = ctx.threshold("min_waiting")
    queued = rep.points.filter(pl.col("waiting") >= min_w)
    if queued.height:
        top = col_max(queued, "usage")
        return (
            f"waiting up to {rep.max_waiting} with KV usage at most {top:.0%} meanwhile: "
            "not KV-bound"
        )
    shown = pct(rep.peak_usage)
    return (
        f"nothing waited and nothing was {rep.words.word('preempted')} (peak KV usage {shown})"
        if not rep.pre.count
        else f"{rep.words.count(rep.pre.count)} but KV usage peaked at {shown}"
    )


def _comparisons(ctx: RuleContext, rep: _Replica, multi: bool) -> Iterator[Comparison]:
    tag = f" [{rep.name}]" if multi else ""
    peak_row = first_max(rep.points, "usage")
    src = [usage_evidence(ctx, peak_row)] if peak_row else []
    yield ctx.compare(
        f"peak KV usage{tag}",
        ctx.threshold("usage_full"),
        round(rep.peak_usage, 4),
        "ratio",
        src,
        "expected: the level counted as full",
    )
    waiting_row = first_max(rep.points, "waiting")
    cited = waiting_row is not None and waiting_cited(waiting_row)
    waited = [waiting_evidence(ctx, waiting_row)] if waiting_row and cited else []
    yield ctx.compare(f"max waiting requests{tag}", 0, rep.max_waiting, "requests", waited)
    yield ctx.compare(
        f"{rep.words.word('preemptions')}{tag}",
        0,
        rep.pre.count,
        rep.words.word("preemptions"),
        rep.pre.evidence,
        f"from {rep.pre.source}"
        if rep.pre.source
        else f"no {rep.words.word('preemption')} witness",
    )
    demand = rep.queued_demand
    if demand is not None and rep.lens is not None:
        yield ctx.compare(
            f"peak demand (running + waiting) x (prompt + max_tokens){tag}",
            demand.pool,
            round(demand.total),
            "tokens",
            [rep.pool.source if rep.pool else None],
            f"{rep.max_concurrent} requests x {fmt_tokens(rep.lens.peak)} tokens "
            f"({rep.lens.source}); expected = usable pool",
        )
    scope = rep.name if multi else None
    for metric, label in (("request_queue_time", "queue time"), ("time_to_first_token", "TTFT")):
        for q in (0.95, 0.99):
            value = histogram_quantile(ctx, metric, q, scope)
            if value is not None:
                yield ctx.compare(
                    f"{label} p{q * 100:.0f}{tag}",
                    None,
                    round(value, 3),
                    "s",
                    [],
                    "metrics histogram, over the whole window",
                )
