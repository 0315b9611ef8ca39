"""The fleet view: one verdict per replica, and which replicas stand out from the fleet.

Per-replica verdicts come from the same rule run as the incident's verdict: the layer-3
rules already judge each replica on its own (their findings carry `replica`), so a
replica's verdict is `classify` over its own findings. KV303 is left out of it: replica
imbalance is a statement about the fleet, shown here as the `hot` flag and the usage gap
against the median of the other replicas. KV304 speaks for the whole incident (healthy only
when every replica is), so a replica without a problem finding gets KV304's own per-replica
judgement.
The load numbers are a few grouped queries over the store, whatever the number of replicas,
and the p95 of each replica's usage from the load points the rules already hold.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.load_picture import points_by_replica
from kvdiag.analyzer.model.reads import Reads
from kvdiag.analyzer.model.samples import samples
from kvdiag.domain.counters import counter_totals
from kvdiag.domain.records.diagnosis import (
    Finding,
    IncidentClass,
    MissingEvidence,
    ReplicaVerdict,
)
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.rules.base import RuleContext
from kvdiag.rules.engine import classify
from kvdiag.rules.engine.rule_runner import selected_rules, thresholds_for
from kvdiag.rules.kv303_replica_imbalance import ReplicaImbalance
from kvdiag.rules.kv304_headroom import KvHeadroom

FLEET_CODE = ReplicaImbalance.code  # judged across replicas, not within one

# Per replica: p95 and peak usage, deepest queue; metrics where scraped, else stats lines.
_LOAD = """
WITH m AS (
  SELECT replica,
         count(*) FILTER (WHERE metric = 'kv_cache_usage') AS usage_points,
         max(value) FILTER (WHERE metric = 'kv_cache_usage') AS peak,
         max(value) FILTER (WHERE metric = 'num_requests_waiting') AS waiting
  FROM metric_samples
  WHERE metric IN ('kv_cache_usage', 'num_requests_waiting') AND suffix = ''
    AND isfinite(value)
  GROUP BY replica),
s AS (
  SELECT replica, max(kv_usage_pct / 100.0) AS peak, max(waiting) AS waiting
  FROM log_stats WHERE kv_usage_pct IS NOT NULL GROUP BY replica)
SELECT coalesce(m.replica, s.replica) AS replica,
       CASE WHEN m.usage_points > 0 THEN 'metrics' WHEN s.peak IS NOT NULL THEN 'log' END
         AS p95_origin,
       coalesce(m.peak, s.peak) AS peak, coalesce(m.waiting, s.waiting) AS waiting
FROM m FULL OUTER JOIN s ON m.replica = s.replica
ORDER BY replica
"""
# The p95 of each replica's usage comes from the rules' load points, which hold the same
# usage samples and stats lines (metrics where scraped, else stats lines): DuckDB's
# quantile_disc kept every replica's values at once, and "equiprobable" is its definition
# (a value of the sample, at rank ceil(q n)). Measurements: bench/RESULTS.md.
_P95 = 0.95

# At most the rows of _LOAD (a replica without a name is a row per source there), read
# first: most incidents are one replica, and _LOAD's quantiles over every usage point (a
# day of stats lines: 3.7 M) needed more memory than the rest of the rules.
_REPLICAS = """
WITH r AS (
  SELECT DISTINCT replica, 'metrics' AS source FROM metric_series
  WHERE metric IN ('kv_cache_usage', 'num_requests_waiting') AND suffix = ''
  UNION ALL
  SELECT DISTINCT replica, 'stats' FROM log_stats WHERE kv_usage_pct IS NOT NULL)
SELECT count(DISTINCT replica) + count(DISTINCT source) FILTER (WHERE replica IS NULL) FROM r
"""


@dataclass(frozen=True, slots=True)
class Limits:
    """When a replica counts as hot (KV303's thresholds, overrides included)."""

    usage_high: float
    usage_gap: float
    waiting_gap: float

    @classmethod
    def of(cls, opts: AnalyzeOptions) -> Limits:
        values = thresholds_for(ReplicaImbalance, opts.thresholds)
        return cls(values["usage_high"], values["usage_gap"], values["waiting_gap"])


@dataclass(frozen=True, slots=True)
class FleetInput:
    """What the fleet view reads: the incident, the rule run's findings and gaps."""

    incident: Incident
    findings: Sequence[Finding]
    missing: Sequence[MissingEvidence]
    opts: AnalyzeOptions


def replica_verdicts(given: FleetInput) -> tuple[ReplicaVerdict, ...]:
    """One row per replica, worst first; empty with fewer than two replicas."""
    reader, findings, missing = given.incident, given.findings, given.missing
    if (reader.scalar(_REPLICAS) or 0) < 2:
        return ()
    load = reader.sql(_LOAD)
    if load.height < 2:
        return ()
    load = _with_p95(given, load)
    limits = Limits.of(given.opts)
    counts = {
        "preemptions": _increase(reader, "num_preemptions", "total"),
        "requests": _increase(reader, "request_prompt_tokens", "count"),
    }
    p95s = [float(v) for v in load["p95"].fill_null(0.0)]
    waits = [int(v) for v in load["waiting"].fill_null(0)]
    rows = [
        _row(
            r,
            [f for f in findings if f.replica == r["replica"]],
            missing,
            counts,
            _others(p95s, i),
            limits,
        )
        for i, r in enumerate(load.to_dicts())
    ]
    rows = [_queue_hot(r, limits, _others(waits, i) == 0) for i, r in enumerate(rows)]
    rows = _with_headroom(given, rows)
    return tuple(sorted(rows, key=_worst_first))


def _headroom_context(given: FleetInput) -> RuleContext:
    values = thresholds_for(KvHeadroom, given.opts.thresholds)
    return RuleContext(KvHeadroom(), given.incident, values)


def _with_p95(given: FleetInput, load: pl.DataFrame) -> pl.DataFrame:
    """The load rows with `p95`: each replica's usage p95 from the source `p95_origin` names."""
    p95: list[dict[str, Any]] = []
    for replica, part in points_by_replica(_headroom_context(given)).items():
        by_origin = part.group_by("origin").agg(
            pl.col("usage").quantile(_P95, interpolation="equiprobable").alias("p95")
        )
        p95 += [{"replica": replica, "p95_origin": str(o), "p95": q} for o, q in by_origin.rows()]
    found = pl.DataFrame(
        p95, schema={"replica": pl.String, "p95_origin": pl.String, "p95": pl.Float64}
    )
    keyed = load.with_columns(pl.col("replica").cast(pl.String))
    return keyed.join(
        found, on=["replica", "p95_origin"], how="left", nulls_equal=True, maintain_order="left"
    )


def _with_headroom(given: FleetInput, rows: list[ReplicaVerdict]) -> list[ReplicaVerdict]:
    """Replicas without a finding of their own: healthy when KV304 says so for them."""
    quiet = [r for r in rows if not r.codes or set(r.codes) == {FLEET_CODE}]
    if not quiet or KvHeadroom not in selected_rules(given.opts):
        return rows
    ctx = _headroom_context(given)
    rule = KvHeadroom()
    parts = points_by_replica(ctx)
    judged = {}
    for row in quiet:
        part = parts.get(row.replica, pl.DataFrame())
        verdict = rule.judge_replica(ctx, row.replica, part) if part.height else "no load"
        if isinstance(verdict, str):
            reason = verdict.removeprefix(f"{row.replica}: ")
            judged[row.replica] = dataclasses.replace(row, summary=f"no verdict: {reason}")
        else:
            judged[row.replica] = dataclasses.replace(
                row,
                primary=IncidentClass.HEALTHY,
                severity=KvHeadroom.severity,
                codes=tuple(sorted({*row.codes, KvHeadroom.code})),
                summary=verdict[0].removeprefix(f"{row.replica}: "),
            )
    return [judged.get(r.replica, r) for r in rows]


def _others(values: Sequence[float], i: int) -> float:
    """The median of the other replicas' values: what this one is compared with."""
    return statistics.median([*values[:i], *values[i + 1 :]])


def _increase(reader: Reads, metric: str, suffix: str) -> dict[str, int]:
    frame = samples(reader, metric, suffix)
    if frame.is_empty():
        return {}
    totals = counter_totals(frame, by=("replica",))
    return {str(r): int(v) for r, v in totals.select("replica", "increase").iter_rows()}


def _row(
    load: dict[str, Any],
    own: list[Finding],
    missing: Sequence[MissingEvidence],
    counts: Mapping[str, dict[str, int]],
    median: float,
    limits: Limits,
) -> ReplicaVerdict:
    name = str(load["replica"])
    judged = [f for f in own if f.code != FLEET_CODE]
    verdict = classify.classify(judged, {}, missing)
    p95 = _float(load["p95"])
    gap = round(p95 - median, 4) if p95 is not None else None
    worst = max((f.severity for f in judged), key=lambda s: s.rank, default=None)
    return ReplicaVerdict(
        replica=name,
        primary=verdict.primary,
        severity=worst,
        codes=tuple(sorted({f.code for f in own})),
        summary=_summary(verdict.primary, judged, verdict.summary),
        peak_kv_usage=_float(load["peak"]),
        p95_kv_usage=p95,
        max_waiting=int(load["waiting"]) if load["waiting"] is not None else None,
        preemptions=counts["preemptions"].get(name),
        requests=counts["requests"].get(name),
        usage_gap=gap,
        hot=p95 is not None
        and gap is not None
        and p95 >= limits.usage_high
        and gap >= limits.usage_gap,
    )


def _queue_hot(row: ReplicaVerdict, limits: Limits, fleet_idle: bool) -> ReplicaVerdict:
    """Also hot: a deep queue where most of the other replicas never queued."""
    if row.hot or not fleet_idle or (row.max_waiting or 0) < limits.waiting_gap:
        return row
    return dataclasses.replace(row, hot=True)


def _summary(primary: IncidentClass, judged: list[Finding], fallback: str) -> str:
    """The primary finding's title, without the replica prefix the rules add."""
    for f in judged:
        if f.implies is primary:
            return f.title
    return fallback


def _float(value: Any) -> float | None:
    return round(float(value), 4) if value is not None else None


def _worst_first(row: ReplicaVerdict) -> tuple[Any, ...]:
    problem = row.primary not in (IncidentClass.HEALTHY, IncidentClass.INSUFFICIENT_EVIDENCE)
    return (
        not row.hot,
        not problem,
        -(row.severity.rank if row.severity else 0),
        classify.PRECEDENCE.index(row.primary) if problem else 0,
        -(row.p95_kv_usage or 0.0),
        -(row.max_waiting or 0),
        row.replica,
    )
