"""The load picture layer-3 rules share: KV usage, waiting and running over time.

One frame, one row per observation, from the /metrics scrapes (1 s apart in the real runs)
and from the engine's stats lines (10 s apart, and the only witness when nothing was
scraped). Each row keeps the provenance of its usage sample and of its waiting sample so
findings can cite the exact lines. Usage is a ratio (0..1) from both sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from kvdiag.analyzer.facts.load import retraction_events
from kvdiag.analyzer.model import Evidence
from kvdiag.rules.base import RuleContext
from kvdiag.rules.queries import (
    counter,
    counter_total,
    gauge,
    of_replica,
    replica_part,
    split_by_replica,
)

_KEY = ["replica", "engine", "ts"]
_PROV = ["source_path", "source_line", "sample_row"]  # sample_row: see queries._SAMPLE_COLS


def _metric_points(ctx: RuleContext) -> pl.DataFrame:
    usage = gauge(ctx, "kv_cache_usage")
    if usage.is_empty():
        return pl.DataFrame()
    frame = usage.select([*_KEY, pl.col("value").alias("usage"), *_PROV])
    for metric, col, prefix in (
        ("num_requests_waiting", "waiting", "w_"),
        ("num_requests_running", "running", "r_"),
    ):
        other = gauge(ctx, metric)
        if other.is_empty():
            frame = frame.with_columns(pl.lit(None, pl.Float64).alias(col))
            if prefix == "w_":
                frame = frame.with_columns(
                    pl.lit(None, pl.String).alias("w_path"),
                    pl.lit(None, pl.Int64).alias("w_line"),
                    pl.lit(None, pl.Int64).alias("w_sample_row"),
                )
            continue
        picked = other.select(
            [
                *_KEY,
                pl.col("value").alias(col),
                pl.col("source_path").alias(f"{prefix}path"),
                pl.col("source_line").alias(f"{prefix}line"),
                pl.col("sample_row").alias(f"{prefix}sample_row"),
            ]
        ).unique(subset=_KEY, keep="first", maintain_order=True)
        frame = frame.join(picked, on=_KEY, how="left", nulls_equal=True)
    frame = frame.drop([c for c in frame.columns if c.startswith("r_")])
    return frame.with_columns(
        pl.lit("metrics").alias("origin"), pl.lit(None, pl.Int64).alias("row_id")
    ).drop("engine")


def _log_points(ctx: RuleContext) -> pl.DataFrame:
    # Numbers only: the provenance stays in the store and the few cited rows read it back
    # by row id (`point_evidence`); a stats line is ~230 characters against ~50 bytes of
    # numbers, and a day of them is millions of rows. DuckDB sorts (within its memory
    # limit; a polars sort held twice the frame); file_no stands for the file's name.
    stats = ctx.sql(
        "SELECT replica, ts, kv_usage_pct / 100.0 AS usage, CAST(waiting AS DOUBLE) AS waiting, "
        "CAST(running AS DOUBLE) AS running, source_line, rowid AS row_id "
        "FROM log_stats JOIN (SELECT source_path, row_number() OVER (ORDER BY source_path) "
        "AS file_no FROM (SELECT DISTINCT source_path FROM log_stats)) f USING (source_path) "
        "WHERE kv_usage_pct IS NOT NULL ORDER BY replica, ts NULLS FIRST, file_no, source_line"
    )
    return stats.with_columns(
        *(pl.lit(None, pl.String).alias(c) for c in ("source_path", "w_path")),
        *(pl.lit(None, pl.Int64).alias(c) for c in ("sample_row", "w_line", "w_sample_row")),
        pl.lit("log").alias("origin"),
    )


COLUMNS = [
    "replica",
    "ts",
    "usage",
    "waiting",
    "running",
    *_PROV,
    "w_path",
    "w_line",
    "w_sample_row",
    "origin",
    "row_id",  # a stats line's row in log_stats (its provenance is read back by it)
]


def load_points(ctx: RuleContext) -> pl.DataFrame:
    """Usage, waiting and running points from every source, metrics first."""
    return ctx.store.memo("load_points", lambda: _load_points(ctx))


def points_by_replica(ctx: RuleContext) -> dict[str, pl.DataFrame]:
    """`load_points` split by replica once per analysis, in replica-name order.

    Every layer-3 rule walks the replicas; filtering the whole frame for each one would cost
    replicas x rows per rule. The frames are shared: not to be changed.
    """
    return ctx.store.memo("load_points_by_replica", lambda: split_by_replica(load_points(ctx)))


def _load_points(ctx: RuleContext) -> pl.DataFrame:
    parts = [p.select(COLUMNS) for p in (_metric_points(ctx), _log_points(ctx)) if p.height]
    if not parts:
        return pl.DataFrame()
    # One chunk: polars sorts and filters a chunked frame through a copy of it (+4x its
    # size measured at 0.75 M rows), and every layer-3 rule sorts and filters this one.
    return pl.concat(parts, how="vertical_relaxed", rechunk=True)


def point_evidence(ctx: RuleContext, row: Mapping[str, Any], what: str, value: Any) -> Evidence:
    """Evidence from a row of `load_points`."""
    return ctx.evidence(_cited(ctx, row), what, value)


def _cited(ctx: RuleContext, row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row with its provenance: a stats line's is read back from the store."""
    row_id = row.get("row_id")
    if row.get("origin") != "log" or row_id is None:
        return row
    query = "SELECT source_path, source_line, raw FROM log_stats WHERE rowid = ?"
    found = ctx.store.memo(("stats_row", row_id), lambda: ctx.sql(query, [row_id]))
    return {**row, **found.row(0, named=True)} if found.height else row


def usage_evidence(ctx: RuleContext, row: dict[str, Any], what: str = "kv_cache_usage") -> Evidence:
    return point_evidence(ctx, row, what, round(float(row["usage"]), 4))


def waiting_cited(row: Mapping[str, Any]) -> bool:
    """Whether a `load_points` row knows where its waiting count was read."""
    return row["origin"] == "log" or row["w_path"] is not None


def waiting_evidence(ctx: RuleContext, row: dict[str, Any]) -> Evidence:
    if row["origin"] == "log":
        src = _cited(ctx, row)
    else:
        src = {
            "source_path": row["w_path"],
            "source_line": row["w_line"],
            "sample_row": row["w_sample_row"],
        }
        src |= {"ts": row["ts"], "origin": row["origin"]}
    value = row["waiting"]
    return point_evidence(
        ctx, src, "num_requests_waiting", int(value) if value is not None else None
    )


@dataclass(frozen=True, slots=True)
class Preemptions:
    count: int
    evidence: tuple[Evidence, ...]
    source: str  # "counter" | "stats lines" | "v0 warnings" | ""


def preemptions(ctx: RuleContext, replica: str | None = None) -> Preemptions:
    """Preemptions in the window from the best witness: counter, stats lines, v0 warnings."""
    series = counter(ctx, "num_preemptions")
    if replica is not None and series.height:
        series = replica_part(ctx, ("counter", "num_preemptions"), series, replica)
    if series.height:
        total = int(counter_total(ctx, "num_preemptions", replica) or 0)
        last = series.row(series.height - 1, named=True)
        return Preemptions(
            total, (ctx.evidence(last, "num_preemptions_total", last["value"]),), "counter"
        )
    where = "preemptions IS NOT NULL AND preemptions > 0"
    params: list[Any] = []
    if replica is not None:
        where += " AND replica = ?"
        params.append(replica)
    rows = ctx.sql(f"SELECT * FROM log_stats WHERE {where} ORDER BY ts, source_line", params)
    if rows.height:
        ev = tuple(
            ctx.evidence(r, "preemptions_in_interval", r["preemptions"])
            for r in rows.head(3).to_dicts()
        )
        return Preemptions(int(rows["preemptions"].sum()), ev, "stats lines")
    return _event_preemptions(ctx, replica)


def _event_preemptions(ctx: RuleContext, replica: str | None) -> Preemptions:
    where, params = ("WHERE replica = ?", [replica]) if replica is not None else ("", [])
    rows = ctx.sql(f"SELECT * FROM log_preemptions {where} ORDER BY ts, source_line", params)
    if rows.is_empty():
        return Preemptions(0, (), "")
    if rows["cumulative"].drop_nulls().len():
        # v0 prints the 1st, 51st, 101st ... preemption: keep its count, not the line count.
        top = rows.sort("cumulative", descending=True, nulls_last=True).row(0, named=True)
        count = int(top["cumulative"])
        top_ev = ctx.evidence(top, "total_num_cumulative_preemption", count)
        return Preemptions(count, (top_ev,), "v0 warnings")
    # SGLang retractions state how many requests each event affected; every TP rank prints
    # the same event, which counts once.
    events = retraction_events(rows)
    count = int(events["count"].fill_null(1).sum())
    ev = tuple(ctx.evidence(r, "retracted_requests", r["count"]) for r in events.head(3).to_dicts())
    return Preemptions(count, ev, "retraction lines")


@dataclass(frozen=True, slots=True)
class Pressure:
    """What an engine does when the pool or the queue cannot take more: swap and reject."""

    swapped: int  # most requests swapped to CPU at once (v0)
    rejected: int  # 429/503 responses and admission rejections
    evidence: tuple[Evidence, ...]


def pressure(ctx: RuleContext, replica: str | None = None) -> Pressure:
    ev: list[Evidence] = []
    swapped = 0
    lines = of_replica(ctx, _SWAPPED_LINES, replica)
    if lines.height:
        row = lines.row(0, named=True)
        swapped = int(row["swapped"])
        ev.append(ctx.evidence(row, "swapped", swapped))
    gauge_rows = ctx.store.memo(
        "swapped_gauge", lambda: gauge(ctx, "num_requests_swapped").filter(pl.col("value") > 0)
    )
    if replica is not None and gauge_rows.height:
        gauge_rows = replica_part(ctx, "swapped_gauge", gauge_rows, replica)
    if gauge_rows.height:
        row = gauge_rows.sort("value", descending=True).row(0, named=True)
        swapped = max(swapped, int(row["value"]))
        ev.append(ctx.evidence(row, "num_requests_swapped", row["value"]))
    http = of_replica(ctx, _REJECTED_HTTP, replica)
    ev += [ctx.evidence(r, "http_status", r["status"]) for r in http.head(2).to_dicts()]
    rejected = http.height + int(counter_total(ctx, "admission_rejections", replica) or 0)
    return Pressure(swapped, rejected, tuple(ev))


_SWAPPED_LINES = "SELECT * FROM log_stats WHERE swapped > 0 ORDER BY swapped DESC"
_REJECTED_HTTP = "SELECT * FROM log_http WHERE status IN (429, 503) ORDER BY ts, source_line"
