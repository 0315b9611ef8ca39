"""What one replica's load says for KV301, and the layer-3 rows it gives the reconciliation.

Gathered once per replica before the rule decides (kv301_saturation.py); the rows compare
peak usage, waiting, preemptions, peak demand (as bounds: support/growth.py) and the
queue-time and TTFT percentiles with what a healthy system shows or the rule's threshold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from kvdiag.analyzer.model.quantities.growth import Growth
from kvdiag.analyzer.model.quantities.load_picture import (
    Preemptions,
    Pressure,
    usage_evidence,
    waiting_cited,
    waiting_evidence,
)
from kvdiag.analyzer.model.quantities.vocabulary import Vocabulary
from kvdiag.analyzer.model.quantities.workload import Lengths, Pool
from kvdiag.analyzer.model.queries import first_max, histogram_quantile
from kvdiag.domain.records.diagnosis import Comparison, Evidence
from kvdiag.rules.base import RuleContext


@dataclass
class ReplicaLoad:
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
    # What the requests held (running + waiting; running alone) may grow to, as bounds
    # (support/growth.py); None without a pool size or anything bounding a request.
    queued: Growth | None
    running: Growth | None
    evidence: list[Evidence] = field(default_factory=list)


def saturation_rows(ctx: RuleContext, rep: ReplicaLoad, multi: bool) -> Iterator[Comparison]:
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
        threshold=True,
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
    yield from _demand_row(ctx, rep, tag)
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


def _demand_row(ctx: RuleContext, rep: ReplicaLoad, tag: str) -> Iterator[Comparison]:
    """The most the peak's requests may hold against the pool, with the fewest; none where
    only max_model_len bounds a request (1 token to max_model_len each says nothing)."""
    grown = rep.queued
    if grown is None or not grown.lengths_known or not grown.demand.requests:
        return
    d = grown.demand
    yield ctx.compare(
        f"peak demand (running + waiting) x ({grown.grows}){tag}",
        d.pool,
        round(d.high),
        "tokens",
        [rep.pool.source if rep.pool else None],
        f"{d.requests} requests ({grown.basis()}); expected: the usable pool",
        threshold=True,
        low=round(d.low),
        high=round(d.high),
    )
