"""KV304: high or low, the level is safe: nothing waits, nothing is preempted, growth fits."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import polars as pl

from kvdiag.analyzer.diagnosis import Evidence, Finding, IncidentClass, RuledOut, Severity
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.demand import Demand
from kvdiag.rules.support.load_picture import (
    points_by_replica,
    preemptions,
    pressure,
    usage_evidence,
)
from kvdiag.rules.support.queries import col_max, first_max
from kvdiag.rules.support.vocabulary import vocabulary
from kvdiag.rules.support.workload import fmt_request, fmt_tokens, lengths, pct, pool


class KvHeadroom(Rule):
    """No request waited or was preempted, no OOM or rejection, and the headroom covers growth.

    "90 % and healthy" is a possible verdict: a high level is safe when fewer than
    `min_waiting` requests ever wait and
    the running requests, each grown to prompt + max_tokens (else to what they generated),
    still fit the pool. When that growth cannot be bounded (no request lengths or pool size)
    a peak at or above `usage_unbounded` is not called healthy: the rule stays silent and
    says why, and the verdict becomes insufficient_evidence rather than a guess.
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

    def check(self, ctx: RuleContext) -> Iterable[Finding | RuledOut]:
        replicas = points_by_replica(ctx)
        if not replicas:
            return
        verdicts = [self._replica(ctx, r, part, len(replicas) > 1) for r, part in replicas.items()]
        blockers = [v for v in verdicts if isinstance(v, str)]
        if blockers:
            yield ctx.rule_out("; ".join(blockers))
            return
        healthy = [v for v in verdicts if not isinstance(v, str)]
        yield ctx.finding("; ".join(t for t, _ in healthy), [e for _, ev in healthy for e in ev])

    def judge_replica(
        self, ctx: RuleContext, name: str, part: pl.DataFrame
    ) -> str | tuple[str, list[Evidence]]:
        """One replica of several (the fleet view): why it is not healthy, or its title."""
        return self._replica(ctx, name, part, multi=True)

    def _replica(
        self, ctx: RuleContext, name: str, part: pl.DataFrame, multi: bool
    ) -> str | tuple[str, list[Evidence]]:
        """A reason it is not healthy, or (title, evidence) when it is."""
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
            return f"{tag}up to {waited} requests waited"
        pre = preemptions(ctx, scope).count
        if pre:
            return tag + vocabulary(ctx, scope).count(pre)
        trouble = list(_trouble(ctx, scope))
        if trouble:
            return tag + ", ".join(trouble)
        growth = _growth(ctx, part, scope)
        shown = pct(peak)
        if growth is None:
            if peak >= ctx.threshold("usage_unbounded"):
                return (
                    f"{tag}KV usage peaked at {shown} and the growth of the running requests "
                    "could not be bounded (no request lengths or pool size)"
                )
            growth_text = "growth not bounded (no request lengths), but the level stayed low"
        else:
            demand, source, peak_tokens = growth
            if demand.exceeds:
                return (
                    f"{tag}{demand.requests} running requests could grow to "
                    f"{fmt_tokens(demand.total)} tokens, {demand.ratio:.1f}x the pool"
                )
            many = "requests" if demand.requests != 1 else "request"
            each = fmt_request(peak_tokens, demand.per_request)
            growth_text = (
                f"{demand.requests} running {many} grown to {each} each ({source}) need "
                f"{fmt_tokens(demand.total)} of {fmt_tokens(demand.pool)} tokens"
            )
        title = (
            f"{tag}KV usage peaked at {shown}; nothing waited, nothing was "
            f"{vocabulary(ctx, scope).word('preempted')}, no OOM or "
            f"rejection; {growth_text}"
        )
        return title, evidence


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
    counts = ctx.store.memo(
        ("count_by_replica", table),
        lambda: dict(ctx.sql(f"SELECT replica, count(*) FROM {table} GROUP BY ALL").rows()),
    )
    return sum(counts.values()) if replica is None else counts.get(replica, 0)


def _growth(
    ctx: RuleContext, part: pl.DataFrame, replica: str | None
) -> tuple[Demand, str, float] | None:
    lens, size = lengths(ctx, replica), pool(ctx, replica)
    if lens is None or size is None:
        return None
    running = int(col_max(part, "running"))
    grows = "prompt + max_tokens" if lens.max_tokens else "prompt + generated"
    # Each request holds whole blocks: count its peak in slots, not tokens.
    return Demand(running, size.slots(lens.peak), size.usable), f"{grows}, {lens.source}", lens.peak
