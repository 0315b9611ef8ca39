"""Shared read queries of the incident model, for the rules, the quantities and the
commands: metric series by canonical name, counter increases, histogram means and
quantiles. They ask for canonical names only (see metric_aliases.toml).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import polars as pl

from kvdiag.analyzer.model.reads import Reads
from kvdiag.domain.counters import counter_increase, counter_totals, series_increase_sql
from kvdiag.domain.histograms import bucket_quantile

__all__ = [
    "bucket_increases",
    "counter",
    "counter_increase",
    "counter_total",
    "first_max",
    "gauge",
    "histogram_buckets",
    "histogram_mean",
    "histogram_quantile",
    "of_replica",
    "prefix_hit_rate",
    "replica_part",
    "split_by_replica",
]

# No provenance: a fleet's gauges and counters are millions of rows, of which evidence cites
# a few; Incident.evidence reads a cited row's file, line and text back by its row id
# (`sample_row`). A day of scrapes kept ~10 such frames of 86,400 rows through the rules,
# 140 bytes a row with path, line, `reason` and `le`, 56 without.
_SAMPLE_COLS = "replica, engine, ts, value, sample_row"


def gauge(ctx: Reads, metric: str, reason: str | None = None) -> pl.DataFrame:
    """Samples of a gauge, ordered by replica and time."""
    where = "metric = ? AND suffix = ''"
    params: list[Any] = [metric]
    if reason is not None:
        where += " AND reason = ?"
        params.append(reason)
    query = (
        f"SELECT {_SAMPLE_COLS} FROM metric_samples WHERE {where} "
        "ORDER BY replica, engine, ts NULLS FIRST, source_path, source_line"
    )
    return ctx.memo(("gauge", metric, reason), lambda: ctx.sql(query, params))


def counter(ctx: Reads, metric: str) -> pl.DataFrame:
    """Samples of a counter (`_total`), ordered by series and time.

    With its series (hashed: 8 bytes a row, not the labels' text): a counter split by a
    label (rejections by `reason`) is one counter per label value, and read as one its
    samples interleave into false resets (0, 72, 0, 72 ... made 72 rejections 3,446).
    """
    query = (
        "SELECT replica, engine, hash(series) AS series, ts, value, sample_row "
        "FROM metric_samples WHERE metric = ? AND suffix = 'total' "
        "ORDER BY replica, engine, series, ts NULLS FIRST, source_path, source_line"
    )
    reader = ctx
    return reader.memo(("counter", metric), lambda: reader.sql(query, [metric]))


def replica_part(ctx: Reads, key: Hashable, frame: pl.DataFrame, replica: str) -> pl.DataFrame:
    """The rows of one replica of `frame` (a memoised whole-fleet frame known by `key`).

    The frame is split once, so asking for each replica of a fleet in turn costs one pass.
    """
    parts = ctx.memo(("parts", key), lambda: split_by_replica(frame))
    return parts.get(replica, frame.clear())


def of_replica(ctx: Reads, query: str, replica: str | None) -> pl.DataFrame:
    """The rows of a whole-store query (read once per analysis), or one replica's of them.

    Row order within a replica is the query's own.
    """
    frame = ctx.memo(("query", query), lambda: ctx.sql(query))
    return frame if replica is None else replica_part(ctx, ("query", query), frame, replica)


def split_by_replica(frame: pl.DataFrame) -> dict[Any, pl.DataFrame]:
    """The frame's rows per replica, in replica-name order.

    Where each replica's rows are already together (a frame sorted by replica), the parts
    are slices of the frame, not copies: a fleet's load points are kept whole and split,
    and copies held them twice.
    """
    if frame.is_empty():
        return {}
    runs = frame.select(pl.col("replica").rle()).unnest("replica")
    names = runs["value"].to_list()
    if len(names) == 1:  # one replica (most incidents): the frame itself
        return {names[0]: frame}
    if len(set(names)) == len(names):
        starts = runs["len"].cum_sum() - runs["len"]
        parts = {
            name: frame.slice(start, length)
            for name, start, length in zip(names, starts, runs["len"], strict=True)
        }
    else:
        by_key = frame.partition_by("replica", as_dict=True)
        parts = {key[0]: part for key, part in by_key.items()}
    return {key: parts[key] for key in sorted(parts, key=lambda k: (k is None, k))}


def histogram_mean(ctx: Reads, metric: str, replica: str | None = None) -> tuple[float, int] | None:
    """(mean, count) of a histogram at its last sample per series, or None."""
    reader = ctx
    frame = reader.memo(("histogram_mean", metric), lambda: _last_sum_count(reader, metric))
    if replica is not None:
        frame = frame.filter(pl.col("replica") == replica)
    sums = frame["s"].drop_nulls()
    s = sums.sum() if sums.len() else None
    c = frame["c"].drop_nulls().sum()
    if not c:
        return None
    return float(s) / float(c), int(c)  # type: ignore[arg-type]


def _last_sum_count(ctx: Reads, metric: str) -> pl.DataFrame:
    """Per replica: the histogram's `_sum` and `_count` at each series' last sample."""
    return ctx.sql(
        "WITH last AS (SELECT replica, engine, suffix, arg_max(value, ts) AS v "
        "FROM metric_samples WHERE metric = ? AND suffix IN ('sum', 'count') "
        "GROUP BY replica, engine, suffix) "
        "SELECT replica, sum(v) FILTER (WHERE suffix = 'sum') AS s, "
        "sum(v) FILTER (WHERE suffix = 'count') AS c FROM last GROUP BY replica",
        [metric],
    )


def first_max(frame: pl.DataFrame, column: str) -> dict[str, Any] | None:
    """The first row holding the column's maximum (the moment it was first reached)."""
    if frame.height == 0 or frame[column].drop_nulls().len() == 0:
        return None
    top = frame[column].max()
    return frame.filter(pl.col(column) == top).row(0, named=True)


def counter_total(ctx: Reads, metric: str, replica: str | None = None) -> float | None:
    """A counter's increase over the window (None when it was never scraped)."""
    if replica is None:
        series = counter(ctx, metric)
        return counter_increase(series) if series.height else None
    reader = ctx
    return reader.memo(("counter_totals", metric), lambda: _increases(reader, metric)).get(replica)


def _increases(ctx: Reads, metric: str) -> dict[Any, float]:
    """Each replica's increase of a counter: counter_increase over its own series."""
    series = counter(ctx, metric)
    if series.is_empty():
        return {}
    totals = counter_totals(series, by=("replica",))
    found = {r: 0.0 for r in series["replica"].unique()}  # as counter_increase: 0 when unsampled
    return found | {r: float(v) for r, v in totals.select("replica", "increase").iter_rows()}


def histogram_quantile(
    ctx: Reads, metric: str, q: float, replica: str | None = None
) -> float | None:
    """The q-quantile of a histogram over the window, as PromQL's histogram_quantile of
    the buckets' increases (across restarts), a replica's engines or the fleet added up.
    None without observations."""
    frame = bucket_increases(ctx, metric)
    if replica is not None:
        frame = frame.filter(pl.col("replica") == replica)
    value = bucket_quantile(q, frame.select("le", "count"))
    return None if math.isnan(value) else value


def histogram_buckets(
    ctx: Reads, metric: str, replica: str | None = None
) -> list[tuple[float, float]]:
    """A histogram's cumulative (le, observations) over the window, one replica's or all."""
    frame = bucket_increases(ctx, metric)
    if replica is not None:
        frame = frame.filter(pl.col("replica") == replica)
    summed = frame.group_by("le").agg(pl.col("count").sum()).sort("le")
    return [(float(le), float(n)) for le, n in summed.iter_rows() if le is not None]


# A histogram's bucket samples, each bound a counter (series) of its own. By series_id: the
# windows sort integers, not the strings naming a series (a day of 1-s scrapes is two
# million bucket samples a histogram).
_BUCKET_SAMPLES = (
    "SELECT series_id, ts, value, rowid AS row FROM metric_points WHERE series_id IN "
    "(SELECT series_id FROM metric_series WHERE metric = ? AND suffix = 'bucket' "
    "AND le IS NOT NULL)"
)


def bucket_increases(ctx: Reads, metric: str) -> pl.DataFrame:
    """Per replica and bucket bound: the observations over the window (`count`)."""
    reader = ctx
    return reader.memo(("bucket_increases", metric), lambda: _bucket_increases(reader, metric))


def _bucket_increases(reader: Reads, metric: str) -> pl.DataFrame:
    per_series = series_increase_sql(_BUCKET_SAMPLES, "series_id", "ts NULLS FIRST, row")
    return reader.sql(
        f"SELECT s.replica, s.le, sum(i.increase) AS count FROM ({per_series}) i "
        "JOIN metric_series s USING (series_id) GROUP BY s.replica, s.le "
        "ORDER BY s.replica, s.le",
        [metric],
    )


def prefix_hit_rate(ctx: Reads, replica: str | None = None) -> float | None:
    """Prefix-cache hits / queries over the window (tokens): the counters, else SGLang's
    prefill lines (cached / cached + new prompt tokens); else the last rate a gauge or a stats
    line printed."""
    queries = counter_total(ctx, "prefix_cache_queries", replica)
    hits = counter_total(ctx, "prefix_cache_hits", replica)
    if queries:
        return (hits or 0.0) / queries
    and_replica, params = (" AND replica = ?", [replica]) if replica is not None else ("", [])
    cached = ctx.sql(
        "SELECT CAST(sum(cached_tokens) AS DOUBLE) AS c, CAST(sum(new_tokens) AS DOUBLE) AS n "
        "FROM log_stats "
        f"WHERE cached_tokens IS NOT NULL AND new_tokens IS NOT NULL{and_replica}",
        params,
    ).row(0, named=True)
    hit, new = float(cached["c"] or 0), float(cached["n"] or 0)
    if hit + new:
        return hit / (hit + new)
    rate = gauge(ctx, "prefix_cache_hit_rate")  # v0's own gauge (0.5.5-0.9.0), SGLang's
    if replica is not None and rate.height:
        rate = replica_part(ctx, ("gauge", "prefix_cache_hit_rate", None), rate, replica)
    if rate.height:
        return float(rate["value"][-1])
    frame = ctx.sql(
        f"SELECT prefix_hit_pct FROM log_stats WHERE prefix_hit_pct IS NOT NULL{and_replica} "
        "ORDER BY ts DESC NULLS LAST, source_line DESC LIMIT 1",
        params,
    )
    return float(frame.item()) / 100 if frame.height else None


def col_max(frame: pl.DataFrame, column: str, default: float = 0.0) -> float:
    """The column's maximum as a float (`default` for an empty or all-null column)."""
    value = frame[column].max() if frame.height else None
    return float(value) if isinstance(value, int | float) else default


def col_median(frame: pl.DataFrame, column: str, default: float = 0.0) -> float:
    value = frame[column].median() if frame.height else None
    return float(value) if isinstance(value, int | float) else default
