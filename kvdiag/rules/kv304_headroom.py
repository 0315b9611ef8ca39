"""KV304: high or low, the level is safe: nothing waits, nothing is preempted, growth fits."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.model.quantities.growth import Growth, growth
from kvdiag.analyzer.model.quantities.load_picture import (
    points_by_replica,
    preemptions,
    pressure,
    usage_evidence,
)
from kvdiag.analyzer.model.quantities.vocabulary import vocabulary
from kvdiag.analyzer.model.quantities.workload import fmt_tokens, pct, pool
from kvdiag.analyzer.model.queries import col_max, first_max
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Evidence,
    Finding,
    IncidentClass,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold


class KvHeadroom(Rule):
    """No request waited or was preempted, no OOM or rejection, and the headroom covers growth.

    "90 % and healthy" is a possible verdict: a high level is safe when fewer than
    `min_waiting` requests ever wait and the running requests, each grown to prompt +
    max_tokens (else to what it generated), still fit the pool even if they were the
    longest the evidence allows (support/growth.py: the longest of those in flight at each
    observation by the client's log, else of the window; histogram bucket edges; else
    max_model_len). When even the shortest they could be exceed the pool, or the bounds
    straddle it, healthy is not claimed and the reason says which. Without request lengths
    or a pool size, a peak at or above `usage_unbounded` is not called healthy either: the
    rule stays silent and says why, and the verdict becomes insufficient_evidence rather
    than a guess.
    """

    code = "KV304"
    name = "peak.headroom"
    layer = 3
    severity = Severity.INFO
    implies = IncidentClass.HEALTHY
    requires_any = ("metric_samples", "log_stats")
    thresholds = (
        Threshold("min_waiting", 1, "requests", "waiting requests that count as a queue"),
        Threshold(
            "usage_unbounded",
            0.80,
            "ratio",
            "without a bound on growth, a peak at or above this is not called healthy",
        ),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        replicas = points_by_replica(ctx)
        if not replicas:
            return
        multi = len(replicas) > 1
        judged = [self._judge(ctx, r, part, multi) for r, part in replicas.items()]
        yield from (j.comparison for j in judged if j.comparison is not None)
        blockers = [j.verdict for j in judged if isinstance(j.verdict, str)]
        if blockers:
            yield ctx.rule_out("; ".join(blockers))
            return
        healthy = [j.verdict for j in judged if not isinstance(j.verdict, str)]
        yield ctx.finding("; ".join(t for t, _ in healthy), [e for _, ev in healthy for e in ev])

    def judge_replica(
        self, ctx: RuleContext, name: str, part: pl.DataFrame
    ) -> str | tuple[str, list[Evidence]]:
        """One replica of several (the fleet view): why it is not healthy, or its title."""
        return self._judge(ctx, name, part, multi=True).verdict

    def _judge(self, ctx: RuleContext, name: str, part: pl.DataFrame, multi: bool) -> _Judgement:
        """A reason it is not healthy, or (title, evidence) when it is; and the growth row."""
        scope = name if multi else None
        tag = f"{name}: " if multi else ""
        peak_row = first_max(part, "usage")
        assert peak_row is not None
        peak = float(peak_row["usage"])
        # The peak as each source saw it: scrapes and stats lines corroborate each other.
        evidence = [
            usage_evidence(ctx, row)
            for origin in ("metrics", "log")
            if (row := first_max(part.filter(pl.col("origin") == origin), "usage")) is not None
        ]
        waited = int(col_max(part, "waiting"))
        if waited >= ctx.threshold("min_waiting"):
            return _Judgement(f"{tag}up to {waited} requests waited")
        pre = preemptions(ctx, scope).count
        if pre:
            return _Judgement(tag + vocabulary(ctx, scope).count(pre))
        trouble = list(_trouble(ctx, scope))
        if trouble:
            return _Judgement(tag + ", ".join(trouble))
        size = pool(ctx, scope)
        grown = growth(ctx, part, scope, size) if size is not None else None
        compared = _comparison(ctx, name if multi else None, grown)
        shown = pct(peak)
        if grown is None or not (grown.lengths_known or grown.demand.fits):
            if peak >= ctx.threshold("usage_unbounded"):
                return _Judgement(
                    f"{tag}KV usage peaked at {shown} and the growth of the running requests "
                    "could not be bounded (no request lengths or pool size)",
                    compared,
                )
            growth_text = "growth not bounded (no request lengths), but the level stayed low"
        elif not grown.demand.fits:
            return _Judgement(tag + _not_shown(grown, shown), compared)
        else:
            growth_text = _fits_text(grown)
        title = (
            f"{tag}KV usage peaked at {shown}; nothing waited, nothing was "
            f"{vocabulary(ctx, scope).word('preempted')}, no OOM or "
            f"rejection; {growth_text}"
        )
        return _Judgement((title, evidence), compared)


@dataclass(frozen=True, slots=True)
class _Judgement:
    """One replica: why it is not healthy, or (title, evidence); its growth comparison."""

    verdict: str | tuple[str, list[Evidence]]
    comparison: Comparison | None = None


def _running(grown: Growth) -> str:
    """How many ran at the moment that bounds the growth, and when."""
    n = grown.demand.requests
    when = f" at {grown.at:%H:%M:%S}" if grown.at is not None else ""
    return f"{n} running {'requests' if n != 1 else 'request'}{when}"


def _fits_text(grown: Growth) -> str:
    d = grown.demand
    exact = round(d.low) == round(d.high)
    need = fmt_tokens(d.high) if exact else f"at most {fmt_tokens(d.high)}"
    verb = "needs" if d.requests == 1 else "need"
    return f"{_running(grown)} {verb} {need} of {fmt_tokens(d.pool)} tokens ({grown.basis()})"


def _not_shown(grown: Growth, shown: str) -> str:
    """Why healthy is not claimed: even the fewest exceed the pool, or the bounds straddle."""
    d = grown.demand
    if d.exceeds:
        return (
            f"{_running(grown)} could grow to at least {fmt_tokens(d.low)} tokens, "
            f"{d.ratio(d.low):.1f}x the pool of {fmt_tokens(d.pool)} ({grown.basis()})"
        )
    return (
        f"KV usage peaked at {shown} and the running requests' growth straddles the pool: "
        f"{_running(grown)} could need {fmt_tokens(d.low)} to {fmt_tokens(d.high)} of "
        f"{fmt_tokens(d.pool)} tokens ({grown.basis()}), so the headroom is neither shown "
        "nor ruled out"
    )


def _comparison(ctx: RuleContext, name: str | None, grown: Growth | None) -> Comparison | None:
    """The growth's range against the pool; none where max_model_len alone bounds it and
    does not fit (a range that wide says nothing a reader could act on)."""
    if grown is None or not grown.demand.requests:
        return None
    if not (grown.lengths_known or grown.demand.fits):
        return None
    d = grown.demand
    tag = f" [{name}]" if name else ""
    return ctx.compare(
        f"growth of the running requests ({grown.grows}){tag}",
        d.pool,
        round(d.high),
        "tokens",
        [],
        f"{_running(grown)} ({grown.basis()}); expected: the usable pool, which the most "
        "they may hold must not pass",
        threshold=True,
        low=round(d.low),
        high=round(d.high),
    )


def _trouble(ctx: RuleContext, replica: str | None) -> Iterator[str]:
    ooms = _count(ctx, "log_oom", replica)
    if ooms:
        yield f"{ooms} CUDA out-of-memory errors"
    errors = _count(ctx, "log_capacity_errors", replica)
    if errors:
        yield f"{errors} capacity errors"
    rejected = pressure(ctx, replica).rejected
    if rejected:
        yield f"{rejected} rejected requests"


def _count(ctx: RuleContext, table: str, replica: str | None) -> int:
    """Rows of a log table, of one replica or of all (counted once for every replica)."""
    counts = ctx.memo(
        ("count_by_replica", table),
        lambda: dict(ctx.sql(f"SELECT replica, count(*) FROM {table} GROUP BY ALL").rows()),
    )
    return sum(counts.values()) if replica is None else counts.get(replica, 0)
