"""The time series the reports chart, and the incident window, read from the store.

Each series comes from /metrics samples when they were scraped (canonical names, see
metric_aliases.toml), else from the engine's periodic stats lines. Series stay per replica
and are downsampled to at most MAX_POINTS points so a day of 1-s scrapes still makes a
small report.

The counter and histogram arithmetic here is deliberately small SQL; it is to move onto the
shared helpers in timeseries.py once those exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.model import Series
from kvdiag.analyzer.store import StoreReader

MAX_POINTS = 500
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
SELECT replica, engine, ts, name,
       CASE WHEN prev IS NULL THEN 0 WHEN value >= prev THEN value - prev ELSE value END AS inc,
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
# summed over the window, then linear interpolation inside the bucket holding the rank.
_QUANTILE = f"""
WITH b AS (
  SELECT replica, le, ts, sum(inc) AS inc FROM (
    SELECT s.*, lag(value) OVER (PARTITION BY replica, engine, le ORDER BY ts) AS prev
    FROM (SELECT replica, coalesce(engine, '') AS engine, le, ts, max(value) AS value
          FROM metric_samples
          WHERE metric = ? AND suffix = 'bucket' AND ts IS NOT NULL AND le IS NOT NULL
          GROUP BY ALL) s)
  CROSS JOIN LATERAL (SELECT CASE WHEN prev IS NULL THEN 0 WHEN value >= prev
                                  THEN value - prev ELSE value END AS inc)
  GROUP BY ALL),
w AS (
  SELECT replica, le, ts, sum(inc) OVER (PARTITION BY replica, le ORDER BY ts
         RANGE BETWEEN to_microseconds(CAST(? AS BIGINT)) PRECEDING
         AND CURRENT ROW) AS c
  FROM b),
r AS (
  SELECT *, lag(le) OVER g AS lo, lag(c) OVER g AS c_lo, max(c) OVER (PARTITION BY replica, ts)
         AS total
  FROM w WINDOW g AS (PARTITION BY replica, ts ORDER BY le))
SELECT replica, ts,
       arg_min(CASE WHEN isinf(le) THEN lo
               ELSE coalesce(lo, 0) + (le - coalesce(lo, 0))
                    * ({QUANTILE} * total - coalesce(c_lo, 0)) / (c - coalesce(c_lo, 0)) END,
               le) AS value
FROM r WHERE total > 0 AND c >= {QUANTILE} * total
GROUP BY replica, ts
"""

_STATS = """
SELECT replica, ts, CAST({agg}({column}) AS DOUBLE) AS value FROM log_stats
WHERE ts IS NOT NULL AND {column} IS NOT NULL GROUP BY ALL
"""


def _metric_frame(reader: StoreReader, spec: _Spec) -> tuple[pl.DataFrame, str]:
    """The series from /metrics, and the names it was read under."""
    assert spec.metric is not None
    if spec.kind == "p99":
        window_us = int(_quantile_window_s(reader, spec.metric) * 1e6)
        query, suffix, params = _QUANTILE, "bucket", [spec.metric, window_us]
    else:
        query = _METRIC_QUERIES[spec.kind]
        suffix = "total" if spec.kind in ("cumulative", "rate") else ""
        params = [spec.metric, suffix]
    frame = reader.sql(query, params)
    names = reader.sql(
        "SELECT DISTINCT name FROM metric_samples WHERE metric = ? AND suffix = ? ORDER BY name",
        [spec.metric, suffix],
    )["name"].to_list()
    return frame, ", ".join(names)


def _quantile_window_s(reader: StoreReader, metric: str) -> float:
    step = reader.scalar(
        "SELECT median(d) FROM (SELECT epoch(ts) - epoch(lag(ts) OVER (PARTITION BY replica "
        "ORDER BY ts)) AS d FROM (SELECT DISTINCT replica, ts FROM metric_samples "
        "WHERE metric = ? AND suffix = 'count' AND ts IS NOT NULL))",
        [metric],
    )
    return max(MIN_QUANTILE_WINDOW_S, 4 * float(step or 0))


def _stats_frame(reader: StoreReader, spec: _Spec) -> tuple[pl.DataFrame, str]:
    """The series from the stats lines (preemptions there are per line, so accumulate)."""
    assert spec.stats_column is not None
    agg = "max" if spec.kind == "gauge_max" else "sum"
    frame = reader.sql(_STATS.format(agg=agg, column=spec.stats_column))
    if spec.kind == "cumulative" and frame.height:
        frame = frame.sort("replica", "ts").with_columns(pl.col("value").cum_sum().over("replica"))
    paths = reader.sql(
        f"SELECT DISTINCT source_path FROM log_stats WHERE {spec.stats_column} IS NOT NULL "
        "ORDER BY source_path"
    )["source_path"].to_list()
    return frame, f"stats lines of {', '.join(paths)}"


def _read(reader: StoreReader, spec: _Spec) -> tuple[pl.DataFrame, str]:
    """Full-resolution (replica, ts, value) in the series' unit, and its source."""
    frame, source = pl.DataFrame(), ""
    if spec.metric is not None:
        frame, names = _metric_frame(reader, spec)
        frame = frame.with_columns(pl.col("value") * spec.scale)
        source = f"metrics: {names}"
    if frame.is_empty() and spec.stats_column is not None:
        frame, source = _stats_frame(reader, spec)
    if frame.is_empty():
        return frame, source
    frame = frame.drop_nulls("value").filter(pl.col("value").is_finite())
    return frame.sort("replica", "ts"), source


def downsample(frame: pl.DataFrame, how: str, max_points: int = MAX_POINTS) -> pl.DataFrame:
    """At most max_points rows per replica: equal time buckets, keeping each bucket's peak
    (or mean, for rates) at the bucket's first time."""
    parts = []
    for _, part in frame.group_by("replica", maintain_order=True):
        if part.height <= max_points:
            parts.append(part)
            continue
        us = part["ts"].dt.epoch("us")
        t0, span = int(us.min()), int(us.max()) - int(us.min()) + 1  # type: ignore[arg-type]
        bucket = ((pl.col("ts").dt.epoch("us") - t0) * max_points // span).alias("bucket")
        agg = pl.col("value").max() if how == "max" else pl.col("value").mean()
        parts.append(
            part.group_by(bucket, maintain_order=True)
            .agg(pl.col("replica").first(), pl.col("ts").first(), agg)
            .drop("bucket")
        )
    return pl.concat(parts).select("replica", "ts", "value")


def _iso(frame: pl.DataFrame) -> list[str]:
    return frame["ts"].dt.strftime("%Y-%m-%dT%H:%M:%S%.3f").to_list()


def _to_series(spec: _Spec, frame: pl.DataFrame, source: str) -> list[Series]:
    out = []
    small = downsample(frame, spec.downsample)
    for (replica,), part in small.group_by("replica", maintain_order=True):
        values = [float(f"{v:.6g}") for v in part["value"].to_list()]
        points = tuple(zip(_iso(part), values, strict=True))
        out.append(Series(spec.name, spec.unit, str(replica), points, source))
    return out


def incident_window(usage: pl.DataFrame, waiting: pl.DataFrame) -> tuple[str, str] | None:
    """From the first to the last moment usage was >= 90 % or a request waited."""
    hot = pl.concat(
        [
            usage.filter(pl.col("value") >= WINDOW_USAGE_PCT).select("ts"),
            waiting.filter(pl.col("value") > 0).select("ts"),
        ]
    )
    if hot.is_empty():
        return None
    span = pl.concat([hot.select(pl.col("ts").min()), hot.select(pl.col("ts").max())])
    first, last = _iso(span)
    return first, last


_EMPTY = pl.DataFrame(schema={"replica": pl.String, "ts": pl.Datetime("us"), "value": pl.Float64})


def build_series(reader: StoreReader) -> tuple[tuple[Series, ...], tuple[str, str] | None]:
    """Every charted series (per replica, downsampled) and the incident window."""
    series: list[Series] = []
    full: dict[str, pl.DataFrame] = {}
    for spec in SPECS:
        frame, source = _read(reader, spec)
        if frame.is_empty():
            continue
        full[spec.name] = frame.select("replica", "ts", "value")
        series += _to_series(spec, frame, source)
    window = incident_window(
        full.get("kv_cache_usage", _EMPTY), full.get("num_requests_waiting", _EMPTY)
    )
    return tuple(series), window
