"""The load picture layer-3 rules share: KV usage, waiting and running over time.

One frame, one row per observation, from the /metrics scrapes (1 s apart in the real runs)
and from the engine's stats lines (10 s apart, and the only witness when nothing was
scraped). Each row keeps the store row ids of its usage sample and of its waiting sample,
by which findings read back the exact lines they cite. Usage is a ratio (0..1) from both
sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.load import retraction_events
from kvdiag.analyzer.model.quantities.rejections import rejections
from kvdiag.analyzer.model.queries import (
    counter,
    counter_total,
    gauge,
    of_replica,
    replica_part,
    split_by_replica,
)
from kvdiag.domain.records.diagnosis import Evidence

_KEY = ["replica", "engine", "ts"]
ORIGIN = pl.Enum(["metrics", "log"])


def _metric_points(ctx: Incident) -> pl.DataFrame:
    usage = gauge(ctx, "kv_cache_usage")
    if usage.is_empty():
        return pl.DataFrame()
    frame = usage.select([*_KEY, pl.col("value").alias("usage"), pl.col("sample_row")])
    for metric, col in (("num_requests_waiting", "waiting"), ("num_requests_running", "running")):
        other = gauge(ctx, metric)
        if other.is_empty():
            frame = frame.with_columns(
                pl.lit(None, pl.Float64).alias(col), pl.lit(None, pl.Int64).alias(f"{col}_row")
            )
            continue
        picked = other.select(
            [*_KEY, pl.col("value").alias(col), pl.col("sample_row").alias(f"{col}_row")]
        ).unique(subset=_KEY, keep="first", maintain_order=True)
        frame = frame.join(picked, on=_KEY, how="left", nulls_equal=True)
    frame = _by_reason(ctx, frame)
    # vLLM 0.20+ counts deferred requests in num_requests_waiting: where some were deferred,
    # the queue that is KV pressure is the `capacity` one, cited from its own sample.
    split = pl.col("cap").is_not_null() & (pl.col("deferred") > 0)
    return frame.select(
        "replica",
        "ts",
        "usage",
        pl.when(split).then(pl.col("cap")).otherwise(pl.col("waiting")).alias("waiting"),
        "running",
        "deferred",
        pl.lit("metrics").alias("origin"),
        pl.col("sample_row").alias("row_id"),
        pl.when(split).then(pl.col("cap_row")).otherwise(pl.col("waiting_row")).alias("w_row"),
    )


def _by_reason(ctx: Incident, frame: pl.DataFrame) -> pl.DataFrame:
    """`cap`, `cap_row` and `deferred` from num_requests_waiting_by_reason (null: unscraped)."""
    for reason, col in (("capacity", "cap"), ("deferred", "deferred")):
        rows = gauge(ctx, "num_requests_waiting_by_reason", reason=reason)
        if rows.is_empty():
            frame = frame.with_columns(
                pl.lit(None, pl.Float64).alias(col), pl.lit(None, pl.Int64).alias(f"{col}_row")
            )
            continue
        picked = rows.select(
            [*_KEY, pl.col("value").alias(col), pl.col("sample_row").alias(f"{col}_row")]
        ).unique(subset=_KEY, keep="first", maintain_order=True)
        frame = frame.join(picked, on=_KEY, how="left", nulls_equal=True)
    return frame


def _log_points(ctx: Incident) -> pl.DataFrame:
    # DuckDB sorts (within its memory limit; a polars sort held twice the frame); file_no
    # stands for the file's name. A stats line's waiting is on the line itself: no w_row.
    # The columns leave DuckDB compact (replica an enum, counts and row ids 32-bit while
    # they fit): its result is kept as it is handed over, where wide columns narrowed
    # afterwards held both at once at the peak.
    # From 0.20 `Waiting: N` counts the `Deferred: M` requests too: the capacity queue, the
    # one that is KV pressure, is N - M.
    counts = _narrowest(ctx, "waiting", "running")
    stats = ctx.sql(
        f"SELECT CAST(replica AS {_replica_enum(ctx)}) AS replica, ts, "
        f"kv_usage_pct / 100.0 AS usage, "
        f"CAST(waiting - coalesce(deferred, 0) AS {counts}) AS waiting, "
        f"CAST(running AS {counts}) AS running, CAST(deferred AS {counts}) AS deferred, "
        f"CAST(rowid AS {_narrowest(ctx, 'rowid', unsigned=True)}) AS row_id "
        "FROM log_stats JOIN (SELECT source_path, row_number() OVER (ORDER BY source_path) "
        "AS file_no FROM (SELECT DISTINCT source_path FROM log_stats)) f USING (source_path) "
        "WHERE kv_usage_pct IS NOT NULL ORDER BY replica, ts NULLS FIRST, file_no, source_line",
        large_result=True,
    )
    return stats.with_columns(pl.lit("log").alias("origin"), pl.lit(None, pl.Int64).alias("w_row"))


def _replica_enum(ctx: Incident) -> str:
    """The replicas of the stats lines as a DuckDB ENUM type (sorted as the names are)."""
    names = ctx.sql("SELECT DISTINCT replica FROM log_stats WHERE replica IS NOT NULL")
    quoted = ["'" + str(name).replace("'", "''") + "'" for name in sorted(names["replica"])]
    return f"ENUM({', '.join(quoted)})" if quoted else "VARCHAR"


def _narrowest(ctx: Incident, *columns: str, unsigned: bool = False) -> str:
    """The 32-bit integer type when every value of the log_stats columns fits, else BIGINT."""
    low, high = (0, 2**32 - 1) if unsigned else (-(2**31), 2**31 - 1)
    fits = " AND ".join(
        f"coalesce(min({c}) >= {low} AND max({c}) <= {high}, true)" for c in columns
    )
    ok = ctx.scalar(f"SELECT {fits} FROM log_stats")
    return ("UINTEGER" if unsigned else "INTEGER") if ok is not False else "BIGINT"


# Numbers only, one row per observation: provenance stays in the store and the few rows
# a finding cites read it back by row id (`point_evidence`). A stats line is ~230
# characters against ~50 bytes of numbers, and a day of them is millions of rows.
COLUMNS = [
    "replica",
    "ts",
    "usage",
    "waiting",  # waiting for capacity where the engine tells deferred requests apart
    "running",
    "deferred",  # vLLM 0.20+: waiting, held back by something other than capacity (null: not told)
    "origin",  # "metrics" | "log"
    "row_id",  # metrics: the usage sample's sample_row; log: the stats line's log_stats rowid
    "w_row",  # metrics: the waiting sample's sample_row (null: not scraped); log: null
]


def load_points(ctx: Incident) -> pl.DataFrame:
    """Usage, waiting and running points from every source, metrics first."""
    return ctx.memo("load_points", lambda: _load_points(ctx))


def points_by_replica(ctx: Incident) -> dict[str, pl.DataFrame]:
    """`load_points` split by replica once per analysis, in replica-name order.

    Every layer-3 rule walks the replicas; filtering the whole frame for each one would cost
    replicas x rows per rule. The frames are shared: not to be changed.
    """
    return ctx.memo("load_points_by_replica", lambda: split_by_replica(load_points(ctx)))


def _load_points(ctx: Incident) -> pl.DataFrame:
    parts = [_compact(p) for p in (_metric_points(ctx), _log_points(ctx)) if p.height]
    if not parts:
        return pl.DataFrame()
    if len(parts) == 1:
        # As DuckDB hands it over (a chunk per ~120,000 rows): copying it into one chunk
        # held two copies at the peak, and the rules' sorts and filters are no slower on
        # the chunks.
        return parts[0]
    metrics, log = parts
    del parts
    return combined(metrics, log)


def combined(metrics: pl.DataFrame, log: pl.DataFrame) -> pl.DataFrame:
    """Both sources' points in one chunk, each replica's rows together: its metrics, then
    its log, each source in its own order.

    One chunk, because polars sorted and filtered a chunked concatenation through a copy
    several times its size. Replicas together, so that a fleet's split is slices of it
    (`split_by_replica`); built from slices of the sources, one copy, not a concatenation
    and then a sort.
    """
    by_source = [split_by_replica(p) for p in _counts_alike(metrics, log)]
    names = sorted({r for split in by_source for r in split}, key=lambda r: (r is None, r))
    pieces = [split[r] for r in names for split in by_source if r in split]
    del by_source
    return pl.concat(pieces, how="vertical_relaxed", rechunk=True)


_COUNTS = ("waiting", "running", "deferred")
_INT32 = (-(2**31), 2**31 - 1)


def _counts_alike(metrics: pl.DataFrame, log: pl.DataFrame) -> list[pl.DataFrame]:
    """The metrics' request counts (gauges: floats) in the log's integer type where each
    value is whole and fits, so that the two sources together keep 4 bytes a count, not 8."""
    casts = []
    for column in _COUNTS:
        want = log.schema[column]
        if want != pl.Int32 or metrics.schema[column] == want:
            continue
        values = metrics[column].drop_nulls()
        whole = values.len() == 0 or bool(
            (values == values.round()).all()
            and _INT32[0] <= float(values.min()) <= float(values.max()) <= _INT32[1]  # type: ignore[arg-type]
        )
        if whole:
            casts.append(pl.col(column).cast(want))
    return [metrics.with_columns(casts) if casts else metrics, log]


def _compact(part: pl.DataFrame) -> pl.DataFrame:
    """The columns in order, the repeated strings as codes: a string is 16 bytes a row in
    polars, a category 1 to 4. Row ids take 32 bits while they fit (tables under 4.29 G
    rows)."""
    fits = part.select((pl.col("row_id", "w_row").max() < 2**32).fill_null(True)).row(0)
    ids = [pl.col(c).cast(pl.UInt32) for c, ok in zip(("row_id", "w_row"), fits, strict=True) if ok]
    return part.select(COLUMNS).with_columns(
        pl.col("replica").cast(pl.Categorical), pl.col("origin").cast(ORIGIN), *ids
    )


def point_evidence(ctx: Incident, row: Mapping[str, Any], what: str, value: Any) -> Evidence:
    """Evidence from a row of `load_points`."""
    return ctx.evidence(_cited(ctx, row["origin"], row["row_id"], row), what, value)


_STATS_ROW = "SELECT source_path, source_line, raw FROM log_stats WHERE rowid = ?"


def _cited(ctx: Incident, origin: str, row_id: Any, row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with the provenance of the store row it stands for, read back."""
    found: dict[str, Any] | None = None
    if origin == "metrics":
        found = ctx.sample_source(int(row_id)) if row_id is not None else None
    else:
        rows = ctx.memo(("stats_row", row_id), lambda: ctx.sql(_STATS_ROW, [row_id]))
        found = rows.row(0, named=True) if rows.height else None
    return {**row, **found} if found is not None else {**row, "source_path": None}


def usage_evidence(ctx: Incident, row: dict[str, Any], what: str = "kv_cache_usage") -> Evidence:
    return point_evidence(ctx, row, what, round(float(row["usage"]), 4))


def waiting_cited(row: Mapping[str, Any]) -> bool:
    """Whether a `load_points` row knows where its waiting count was read."""
    return row["origin"] == "log" or row["w_row"] is not None


def waiting_evidence(ctx: Incident, row: dict[str, Any], what: str | None = None) -> Evidence:
    value = row["waiting"]
    waiting = int(value) if value is not None else None
    if what is None:  # with deferred requests set apart, the count is the capacity queue
        what = "num_requests_waiting_by_reason{capacity}" if row.get("deferred") else None
    what = what or "num_requests_waiting"
    if row["origin"] == "log":  # the stats line with the usage is the one with the queue
        return point_evidence(ctx, row, what, waiting)
    src = _cited(ctx, "metrics", row["w_row"], {"ts": row["ts"]})
    return ctx.evidence(src, what, waiting)


def aggregated_note(ctx: Incident, part: pl.DataFrame, scope: str | None) -> str:
    """What a reader must know when the points are `N Engines Aggregated:` stats lines
    (vLLM 0.11.2+, --aggregate-engine-logging under data parallel): one line stands for N
    engines, each with its own pool, and nothing shows how the load was split among them."""
    if part.is_empty() or (part["origin"] == "metrics").any():
        return ""  # scrapes come per engine (`engine` label) and are read first
    where = "engines IS NOT NULL" + (" AND replica = ?" if scope else "")
    engines = ctx.scalar(
        f"SELECT max(engines) FROM log_stats WHERE {where}", [scope] if scope else None
    )
    if not engines:
        return ""
    return (
        f" ({engines} engines aggregated in each stats line: requests summed over their "
        f"{engines} pools, KV usage the mean of them)"
    )


@dataclass(frozen=True, slots=True)
class Preemptions:
    count: int
    evidence: tuple[Evidence, ...]
    source: str  # "counter" | "stats lines" | "v0 warnings" | "retraction lines" | ""
    # From the engine's event lines only (log_preemptions): one row per event (a retraction
    # printed by several TP ranks is one), and the processes that printed them.
    events: pl.DataFrame | None = None
    printed_by: tuple[str, ...] = ()


def preemptions(ctx: Incident, replica: str | None = None) -> Preemptions:
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


def _event_preemptions(ctx: Incident, replica: str | None) -> Preemptions:
    where, params = ("WHERE replica = ?", [replica]) if replica is not None else ("", [])
    rows = ctx.sql(f"SELECT * FROM log_preemptions {where} ORDER BY ts, source_line", params)
    if rows.is_empty():
        return Preemptions(0, (), "")
    # SGLang retractions state how many requests each event affected; every TP rank prints
    # the same event, which counts once.
    events = retraction_events(rows)
    printed_by = tuple(rows["process"].drop_nulls().unique(maintain_order=True).to_list())
    if rows["cumulative"].drop_nulls().len():
        # v0 prints the 1st, 51st, 101st ... preemption: keep its count, not the line count.
        top = rows.sort("cumulative", descending=True, nulls_last=True).row(0, named=True)
        count = int(top["cumulative"])
        top_ev = ctx.evidence(top, "total_num_cumulative_preemption", count)
        return Preemptions(count, (top_ev,), "v0 warnings", events, printed_by)
    count = int(events["count"].fill_null(1).sum())
    ev = tuple(ctx.evidence(r, "retracted_requests", r["count"]) for r in events.head(3).to_dicts())
    return Preemptions(count, ev, "retraction lines", events, printed_by)


@dataclass(frozen=True, slots=True)
class Pressure:
    """What an engine does when the pool or the queue cannot take more: swap and reject."""

    swapped: int  # most requests swapped to CPU at once (v0)
    rejected: int  # 429/503 responses and admission rejections
    evidence: tuple[Evidence, ...]


def pressure(ctx: Incident, replica: str | None = None) -> Pressure:
    ev: list[Evidence] = []
    swapped = 0
    lines = of_replica(ctx, _SWAPPED_LINES, replica)
    if lines.height:
        row = lines.row(0, named=True)
        swapped = int(row["swapped"])
        ev.append(ctx.evidence(row, "swapped", swapped))
    gauge_rows = ctx.memo(
        "swapped_gauge", lambda: gauge(ctx, "num_requests_swapped").filter(pl.col("value") > 0)
    )
    if replica is not None and gauge_rows.height:
        gauge_rows = replica_part(ctx, "swapped_gauge", gauge_rows, replica)
    if gauge_rows.height:
        row = gauge_rows.sort("value", descending=True).row(0, named=True)
        swapped = max(swapped, int(row["value"]))
        ev.append(ctx.evidence(row, "num_requests_swapped", row["value"]))
    # Access lines, the admission counter and a client log see the same rejections.
    refused = rejections(ctx, replica)
    ev += [e for e in refused.evidence if e.what == "rejected_request"]
    return Pressure(swapped, refused.count, tuple(ev))


_SWAPPED_LINES = "SELECT * FROM log_stats WHERE swapped > 0 ORDER BY swapped DESC"
