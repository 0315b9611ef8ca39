"""KV303: one replica far fuller, or far more queued, than its peers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.model.quantities.episodes import best_source
from kvdiag.analyzer.model.quantities.load_picture import (
    points_by_replica,
    usage_evidence,
    waiting_evidence,
)
from kvdiag.analyzer.model.quantities.vocabulary import fleet_phrase
from kvdiag.analyzer.model.quantities.workload import pct
from kvdiag.analyzer.model.queries import (
    col_max,
    first_max,
    gauge,
    histogram_mean,
    replica_part,
)
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Evidence,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold

# Settings that change a replica's capacity; replicas that differ here are not comparable.
CAPACITY_KEYS = (
    "num_gpu_blocks",
    "block_size",
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "cache_dtype",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
)


@dataclass(frozen=True, slots=True)
class _Replica:
    name: str
    p95_usage: float
    max_waiting: int
    requests: int | None
    usage_row: dict[str, object]
    waiting_row: dict[str, object] | None


class ReplicaImbalance(Rule):
    """One replica is far fuller or far more queued than its peers in the same incident.

    Per replica: p95 KV usage, the deepest queue and the requests it served. Fires when the
    fullest replica's p95 usage is at least `usage_high` and at least `usage_gap` above the
    emptiest, or when one replica queued `waiting_gap` or more while another never queued.
    A warning when the replicas are configured alike (look at the load balancer: request
    counts, stickiness, retries); info when their capacity settings differ, since then the
    difference is explained by configuration drift, not by the balancer.
    """

    code = "KV303"
    name = "peak.replica_imbalance"
    layer = 3
    severity = Severity.WARNING
    implies = IncidentClass.REPLICA_IMBALANCE
    requires_any = ("metric_samples", "log_stats")
    thresholds = (
        Threshold("usage_high", 0.80, "ratio", "the fullest replica's p95 usage must reach this"),
        Threshold("usage_gap", 0.30, "ratio", "p95 usage difference that counts as imbalance"),
        Threshold("waiting_gap", 5, "requests", "a queue this deep where a peer never queued"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        replicas = points_by_replica(ctx)
        if len(replicas) < 2:
            return  # one replica: nothing to compare
        reps = [_summary(ctx, n, best_source(part)) for n, part in replicas.items()]
        for r in reps:
            yield ctx.compare(
                f"p95 KV usage [{r.name}]",
                None,
                round(r.p95_usage, 4),
                "ratio",
                [usage_evidence(ctx, r.usage_row)],
            )
        full = max(reps, key=lambda r: (r.p95_usage, r.max_waiting))
        empty = min(reps, key=lambda r: (r.p95_usage, r.max_waiting))
        queued = max(reps, key=lambda r: r.max_waiting)
        idle = min(reps, key=lambda r: r.max_waiting)
        by_usage = full.p95_usage >= ctx.threshold(
            "usage_high"
        ) and full.p95_usage - empty.p95_usage >= ctx.threshold("usage_gap")
        by_queue = queued.max_waiting >= ctx.threshold("waiting_gap") and idle.max_waiting == 0
        if not (by_usage or by_queue):
            spread = f"{pct(empty.p95_usage)}-{pct(full.p95_usage)}"
            yield ctx.rule_out(
                f"replicas alike: p95 KV usage {spread}, deepest queue {queued.max_waiting}"
            )
            return
        hot, cold = (full, empty) if by_usage else (queued, idle)
        yield self._finding(ctx, hot, cold, reps)

    def _finding(
        self, ctx: RuleContext, hot: _Replica, cold: _Replica, reps: list[_Replica]
    ) -> Finding:
        drift = list(_drift(ctx, [r.name for r in reps]))
        title = (
            f"Replica {hot.name} at {pct(hot.p95_usage)} p95 KV usage with up to "
            f"{hot.max_waiting} waiting; replica {cold.name} at {pct(cold.p95_usage)} with "
            f"{cold.max_waiting}"
        )
        if hot.requests and cold.requests:
            title += (
                f"; they served {hot.requests:,} and {cold.requests:,} requests "
                f"({hot.requests / cold.requests:.1f}x)"
            )
        remedies = [_balance(ctx, hot, cold)]
        severity = Severity.WARNING
        if drift:
            title += f"; configured differently: {'; '.join(drift)}"
            remedies.insert(0, Remedy("align the replicas' configuration", "; ".join(drift)))
            severity = Severity.INFO
        ev: list[Evidence] = [
            usage_evidence(ctx, hot.usage_row),
            usage_evidence(ctx, cold.usage_row),
        ]
        if hot.waiting_row is not None:
            ev.insert(1, waiting_evidence(ctx, hot.waiting_row))
        ev += _router_evidence(ctx, [hot.name, cold.name])
        return ctx.finding(title, ev, remedies, severity=severity, replica=hot.name)


def _balance(ctx: RuleContext, hot: _Replica, cold: _Replica) -> Remedy:
    """The balancing remedy, in the router's words when a framework (Dynamo) routed the fleet."""
    routed = fleet_phrase(ctx, "balance")
    why = fleet_phrase(ctx, "balance_why")
    if routed and why:
        return Remedy(routed, why.format(hot=hot.name, cold=cold.name))
    return Remedy(
        "balance by outstanding requests (least-loaded), drop session stickiness, "
        "stop retry storms",
        f"replica {cold.name} had room while {hot.name} queued: look at the load "
        "balancer before adding GPUs",
    )


def _router_evidence(ctx: RuleContext, names: list[str]) -> list[Evidence]:
    """What the router itself counted on each worker at its peak (Dynamo's KV router, where
    its frontend was scraped): the view it chose workers by while one of them filled."""
    metric = "router_active_decode_blocks"
    rows = gauge(ctx, metric)
    out = []
    for name in names:
        peak = first_max(replica_part(ctx, ("gauge", metric, None), rows, name), "value")
        if peak is not None:
            out.append(ctx.evidence(peak, f"router's active decode blocks [{name}]", peak["value"]))
    return out


def _summary(ctx: RuleContext, name: str, part: pl.DataFrame) -> _Replica:
    quantile = part["usage"].quantile(0.95, "nearest")
    p95 = float(quantile) if isinstance(quantile, int | float) else 0.0
    row = part.filter(pl.col("usage") >= p95).row(0, named=True)
    waiting = first_max(part, "waiting")
    served = histogram_mean(ctx, "request_prompt_tokens", name)
    return _Replica(
        name,
        p95,
        int(col_max(part, "waiting")),
        served[1] if served else None,
        row,
        waiting if waiting and waiting["waiting"] else None,
    )


def _drift(ctx: RuleContext, names: list[str]) -> Iterator[str]:
    for key in CAPACITY_KEYS:
        values = {}
        for n in names:
            row = ctx.config(key, n)
            if row is not None:
                values[n] = str(row["value"])
        if len(values) == len(names) and len(set(values.values())) > 1:
            yield f"{key} " + " vs ".join(f"{v} ({n})" for n, v in values.items())
