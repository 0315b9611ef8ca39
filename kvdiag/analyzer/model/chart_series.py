"""The time series the reports chart, and the incident window, read from the store.

Each series comes from /metrics samples when they were scraped (canonical names, see
metric_aliases.toml), else from the engine's periodic stats lines. Series stay per replica
and are downsampled to at most MAX_POINTS points so a day of 1-s scrapes still makes a
small report.

The counter and histogram arithmetic here is SQL, not kvdiag/domain's polars helpers: it
runs where the samples are, within DuckDB's memory limit, and only a chart's points leave
it. Its rules are the domain's own SQL text (the reset rule, the quantile interpolation),
which tests hold to the polars helpers.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain.counters import SQL_STEP_INCREASE
from kvdiag.domain.histograms import bucket_quantile_sql
from kvdiag.domain.records.diagnosis import Series

MAX_POINTS = 500
# A fleet's charts keep its busiest replicas: hundreds of replicas drawn as lines are
# unreadable and swell the JSON report; the fleet table still lists every replica.
MAX_CHARTED_REPLICAS = 8
_BUSY_MEASURES = ("num_requests_waiting", "kv_cache_usage", "num_preemptions")  # CHARTED_BY
WINDOW_USAGE_PCT = 90.0  # the incident window: usage at or above this, or requests waiting
QUANTILE = 0.99
MIN_QUANTILE_WINDOW_S = 60.0  # trailing window of the histogram quantiles (at least 4 scrapes)


@dataclass(frozen=True, slots=True)
class _Spec:
    """One charted series: where it comes from in the metrics and in the stats lines."""

    name: str
    unit: str
    metric: str | None  # canonical metric name
    kind: str  # gauge_max | gauge_sum | cumulative | rate | p99
    stats_column: str | None  # log_stats column used when the metric was not scraped
    scale: float = 1.0  # metric value -> unit (ratio -> percent)
    downsample: str = "max"  # how points merge when downsampled: max keeps the peaks


SPECS: tuple[_Spec, ...] = (
    _Spec("kv_cache_usage", "%", "kv_cache_usage", "gauge_max", "kv_usage_pct", 100.0),
    _Spec("num_requests_running", "requests", "num_requests_running", "gauge_sum", "running"),
    _Spec("num_requests_waiting", "requests", "num_requests_waiting", "gauge_sum", "waiting"),
    _Spec("num_preemptions", "preemptions", "num_preemptions", "cumulative", "preemptions"),
    _Spec("request_queue_time_p99", "s", "request_queue_time", "p99", None),
    _Spec("time_to_first_token_p99", "s", "time_to_first_token", "p99", None),
    _Spec("prompt_throughput", "tokens/s", "prompt_tokens", "rate", "prompt_tps", 1, "mean"),
    _Spec("generation_throughput", "tokens/s", "generation_tokens", "rate", "gen_tps", 1, "mean"),
)

# Per (replica, engine) series of one metric, one value per scrape time.
_SAMPLES = """
SELECT replica, coalesce(engine, '') AS engine, ts, max(value) AS value, any_value(name) AS name
FROM metric_samples
WHERE metric = ? AND suffix = ? AND ts IS NOT NULL AND NOT isnan(value)
GROUP BY ALL
"""

# Reset-aware increase since the previous scrape: a drop means the process restarted.
_STEPS = f"""
WITH s AS ({_SAMPLES}),
l AS (SELECT *, lag(value) OVER (PARTITION BY replica, engine ORDER BY ts) AS prev,
        lag(ts) OVER (PARTITION BY replica, engine ORDER BY ts) AS prev_ts FROM s)
SELECT replica, engine, ts, name, {SQL_STEP_INCREASE} AS inc,
       epoch(ts) - epoch(prev_ts) AS dt
FROM l
"""

_METRIC_QUERIES = {
    "gauge_max": f"SELECT replica, ts, max(value) AS value FROM ({_SAMPLES}) GROUP BY ALL",
    "gauge_sum": f"SELECT replica, ts, sum(value) AS value FROM ({_SAMPLES}) GROUP BY ALL",
    "cumulative": f"""
        SELECT replica, ts, sum(sum(inc)) OVER (PARTITION BY replica ORDER BY ts) AS value
        FROM ({_STEPS}) GROUP BY replica, ts""",
    "rate": f"""
        SELECT replica, ts, sum(inc / dt) AS value
        FROM ({_STEPS}) WHERE dt > 0 GROUP BY replica, ts""",
}

# histogram_quantile over a trailing window, as Prometheus computes it: bucket increases
# summed over the window (`c` per charted replica `r`, bound and scrape: `b` merged the
# engines' equal bounds), then the domain's interpolation. Each (replica, engine, le) and
# (replica, le) is numbered first, from the few series rows, so the windows over every sample
# (1.9 million bucket samples for a day of 1-s scrapes) sort integers, not the strings of
# each row.
# The replicas charted (NULL: all) are chosen there too: a filter on the result would not
# reach through the numbering, and a fleet's other replicas would be computed for nothing.
_QUANTILE = f"""
WITH k AS (
  SELECT series_id, replica, le,
         dense_rank() OVER (ORDER BY replica, coalesce(engine, ''), le) AS ele,
         dense_rank() OVER (ORDER BY replica, le) AS rle,
         dense_rank() OVER (ORDER BY replica) AS r
  FROM metric_series WHERE metric = ? AND suffix = 'bucket' AND le IS NOT NULL
    AND coalesce(list_contains(CAST(? AS VARCHAR[]), replica), true)),
s AS (
  SELECT k.ele, any_value(k.rle) AS rle, p.ts, max(p.value) AS value
  FROM metric_points p JOIN k USING (series_id) WHERE p.ts IS NOT NULL GROUP BY k.ele, p.ts),
b AS (
  SELECT rle, ts, sum({SQL_STEP_INCREASE}) AS inc
  FROM (SELECT *, lag(value) OVER (PARTITION BY ele ORDER BY ts) AS prev FROM s)
  GROUP BY rle, ts),
w AS (
  SELECT rle, ts, sum(inc) OVER (PARTITION BY rle ORDER BY ts
         RANGE BETWEEN to_microseconds(CAST(? AS BIGINT)) PRECEDING AND CURRENT ROW) AS c
  FROM b),
c AS (SELECT l.r, w.ts, l.le, w.c FROM w JOIN (SELECT DISTINCT rle, r, le FROM k) l USING (rle))
SELECT n.replica, q.ts, q.value
FROM ({bucket_quantile_sql(QUANTILE, "SELECT * FROM c", ("r", "ts"), merged=True)}) q
JOIN (SELECT DISTINCT r, replica FROM k) n USING (r)
"""

_STATS = """
SELECT replica, ts, CAST({agg}({column}) AS DOUBLE) AS value FROM log_stats
WHERE ts IS NOT NULL AND {column} IS NOT NULL GROUP BY ALL
"""


def _metric_query(
    reader: StoreReader, spec: _Spec, only: list[str] | None
) -> tuple[str, list[object], str]:
    """The full-resolution query of the series from /metrics, and the names it was read under
    (a quantile's only of the replicas in `only`, or all)."""
    assert spec.metric is not None
    if spec.kind == "p99":
        window_us = int(_quantile_window_s(reader, spec.metric) * 1e6)
        query, suffix, params = _QUANTILE, "bucket", [spec.metric, only, window_us]
    else:
        query = _METRIC_QUERIES[spec.kind]
        suffix = "total" if spec.kind in ("cumulative", "rate") else ""
        params = [spec.metric, suffix]
    names = reader.sql(
        "SELECT DISTINCT name FROM metric_samples WHERE metric = ? AND suffix = ? ORDER BY name",
        [spec.metric, suffix],
    )["name"].to_list()
    scaled = f"SELECT replica, ts, value * {spec.scale!r} AS value FROM ({query})"
    return scaled, list(params), ", ".join(names)


def _quantile_window_s(reader: StoreReader, metric: str) -> float:
    step = reader.scalar(
        "SELECT median(d) FROM (SELECT epoch(ts) - epoch(lag(ts) OVER (PARTITION BY replica "
        "ORDER BY ts)) AS d FROM (SELECT DISTINCT replica, ts FROM metric_samples "
        "WHERE metric = ? AND suffix = 'count' AND ts IS NOT NULL))",
        [metric],
    )
    return max(MIN_QUANTILE_WINDOW_S, 4 * float(step or 0))


def _stats_query(reader: StoreReader, spec: _Spec) -> tuple[str, list[object], str]:
    """The series from the stats lines (preemptions there are per line, so accumulate)."""
    assert spec.stats_column is not None
    agg = "max" if spec.kind == "gauge_max" else "sum"
    query = _STATS.format(agg=agg, column=spec.stats_column)
    if spec.kind == "cumulative":
        query = (
            "SELECT replica, ts, sum(value) OVER (PARTITION BY replica ORDER BY ts "
            f"ROWS UNBOUNDED PRECEDING) AS value FROM ({query})"
        )
    paths = reader.sql(
        f"SELECT DISTINCT source_path FROM log_stats WHERE {spec.stats_column} IS NOT NULL "
        "ORDER BY source_path"
    )["source_path"].to_list()
    return query, [], f"stats lines of {', '.join(paths)}"


def _charted(query: str) -> str:
    """The rows of a (replica, ts, value) query that can be charted."""
    return f"SELECT * FROM ({query}) WHERE value IS NOT NULL AND isfinite(value)"


def _read(
    reader: StoreReader, spec: _Spec, only: list[str] | None = None
) -> tuple[pl.DataFrame, str]:
    """The series' downsampled rows (of the replicas in `only`, or all) and its source.

    The reduction runs in DuckDB: a day of stats lines or scrapes is millions of rows, of
    which a chart keeps MAX_POINTS per replica.
    """
    if spec.metric is not None and reader.has_rows("metric_samples"):
        query, params, names = _metric_query(reader, spec, only)
        small = _downsampled(reader, spec, query, params, only)
        if small.height or spec.stats_column is None:
            return small, f"metrics: {names}"
    if spec.stats_column is None or not reader.has_rows("log_stats"):
        return pl.DataFrame(), ""  # nothing to chart: no query for what is known empty
    query, params, source = _stats_query(reader, spec)
    return _downsampled(reader, spec, query, params, only), source


def _downsampled(
    reader: StoreReader, spec: _Spec, query: str, params: list[object], only: list[str] | None
) -> pl.DataFrame:
    if only is not None:  # DuckDB pushes the filter down to the scan, through the windows
        query = f"SELECT * FROM ({query}) WHERE list_contains(?, replica)"
        params = [*params, only]
    sql = downsampled(_charted(query), spec.downsample, hot=_HOT.get(spec.name))
    # From the write-time limit, raised only for a query that needs more: the charts run
    # right after the rules let go of their frames, whose pages the allocator hands back
    # a little later, and DuckDB's full share on top made the peak of a large fleet.
    return reader.sql(sql, params, large_result=True)


def downsampled(query: str, how: str, max_points: int = MAX_POINTS, hot: str | None = None) -> str:
    """SQL: at most max_points rows per replica of a (replica, ts, value) query, by replica
    and time: equal time buckets, keeping each bucket's peak (or mean, for rates) at the
    bucket's first time. A series that fits keeps its rows.

    `hot`, a condition on the value: each bucket's first and last time at full resolution
    where it holds (hot_first, hot_last; NULL where it never does), which the incident
    window is read from in the same pass (a query of its own would read the whole series
    again).
    """
    agg = "max" if how == "max" else "avg"
    spans = (
        f", min(ts) FILTER (WHERE {hot}) AS hot_first, max(ts) FILTER (WHERE {hot}) AS hot_last"
        if hot
        else ""
    )
    return f"""
WITH q AS ({query}),
b AS (SELECT replica, epoch_us(min(ts)) AS t0, epoch_us(max(ts)) - epoch_us(min(ts)) + 1 AS span,
             count(*) AS n FROM q GROUP BY replica),
k AS (SELECT q.replica, q.ts, q.value,
             CASE WHEN b.n <= {int(max_points)} THEN epoch_us(q.ts)
                  ELSE (epoch_us(q.ts) - b.t0) * {int(max_points)} // b.span END AS bucket
      FROM q JOIN b USING (replica))
SELECT replica, min(ts) AS ts, {agg}(value) AS value{spans} FROM k GROUP BY replica, bucket
ORDER BY replica, ts
"""


def _iso(frame: pl.DataFrame) -> list[str]:
    return frame["ts"].dt.strftime("%Y-%m-%dT%H:%M:%S%.3f").to_list()


def _to_series(spec: _Spec, small: pl.DataFrame, source: str) -> list[Series]:
    out = []
    for (replica,), part in small.group_by("replica", maintain_order=True):
        values = [float(f"{v:.6g}") for v in part["value"].to_list()]
        points = tuple(zip(_iso(part), values, strict=True))
        out.append(Series(spec.name, spec.unit, str(replica), points, source))
    return out


def incident_window(spans: list[pl.DataFrame]) -> tuple[str, str] | None:
    """From the first to the last moment usage was >= 90 % or a request waited.

    `spans`: downsampled series with their buckets' hot_first and hot_last (`downsampled`).
    """
    if not spans:
        return None
    hot = pl.concat([s.select("hot_first", "hot_last") for s in spans])
    span = hot.select(pl.col("hot_first").min().append(pl.col("hot_last").max()).alias("ts"))
    if span["ts"].null_count():
        return None
    first, last = _iso(span)
    return first, last


# The rows of each series that open the incident window.
_HOT = {"kv_cache_usage": f"value >= {WINDOW_USAGE_PCT!r}", "num_requests_waiting": "value > 0"}


def build_series(reader: StoreReader) -> tuple[tuple[Series, ...], tuple[str, str] | None]:
    """Every charted series (per replica, downsampled) and the incident window.

    The measures that rank replicas (CHARTED_BY) are read first, for every replica; the
    other series only for the replicas charted, when a fleet has more than can be.
    """
    per_spec: dict[str, list[Series]] = {}
    spans: list[pl.DataFrame] = []
    only: list[str] | None = None
    for spec in sorted(SPECS, key=lambda s: s.name not in _BUSY_MEASURES):
        if spec.name not in _BUSY_MEASURES and only is None:
            only = _fleet_charted([x for xs in per_spec.values() for x in xs])
        small, source = _read(reader, spec, only)
        if small.is_empty():
            continue
        if spec.name in _HOT:
            spans.append(small)
        per_spec[spec.name] = _to_series(spec, small, source)
    series = [x for spec in SPECS for x in per_spec.get(spec.name, [])]
    busiest = set(busiest_replicas(series))
    return tuple(s for s in series if s.replica in busiest), incident_window(spans)


def _fleet_charted(ranking: list[Series]) -> list[str] | None:
    """The replicas to chart when the ranking measures name more than can be, else None
    (all of them: a replica with none of those measures still gets its other charts)."""
    if len({s.replica for s in ranking}) <= MAX_CHARTED_REPLICAS:
        return None
    return busiest_replicas(ranking)


def busiest_replicas(series: list[Series], limit: int = MAX_CHARTED_REPLICAS) -> list[str]:
    """The replicas to chart, busiest first (see CHARTED_BY): all of them up to `limit`."""
    quiet = [0.0] * len(_BUSY_MEASURES)
    peaks: dict[str, list[float]] = {}
    for s in series:
        if s.name in _BUSY_MEASURES:
            row = peaks.setdefault(s.replica, list(quiet))
            i = _BUSY_MEASURES.index(s.name)
            row[i] = max(row[i], max((v for _, v in s.points), default=0.0))
    replicas = {s.replica for s in series}
    ranked = sorted(replicas, key=lambda r: ([-v for v in peaks.get(r, quiet)], r))
    return ranked[:limit]
