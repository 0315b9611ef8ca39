"""Derived series from metric samples: counter increases and rates, histogram quantiles.

Shared by facts and rules. The functions take polars frames of metric_samples rows (what
`samples(reader, metric)` returns, or any frame with `value`, `ts` and some of the series
columns) and compute per series: replica, engine and the labels other than `le` (the
`series` column). Columns a frame lacks are left out of the grouping. `by` chooses the
output grouping; it may be coarser than a series (`("replica",)` adds up a replica's
engines), in which case increases are computed per series first and then summed, as
`sum by (replica) (increase(...))` would.

Counters: an increase is the difference to the previous sample of the same series; a drop
means the process restarted and the counter began again from zero, so the new value counts
in full (Prometheus' reset rule). A series seen once has no window: its value, the count
since the process started, is the best available figure.

Histograms: quantiles are computed from the `_bucket` increases exactly as PromQL's
histogram_quantile does: buckets sorted by `le`, equal bounds merged, counts made
monotonic, linear interpolation inside the bucket that holds the rank (0 as the lower
bound of the first bucket when it is positive), the second-highest bound when the rank
falls in the +Inf bucket, NaN without observations, without a +Inf bucket or with fewer
than two buckets. (Prometheus' 1e-12 float-precision correction is not applied.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

import polars as pl

SERIES = ("replica", "engine", "series")
QUANTILES = (0.5, 0.95, 0.99)
_ORDER = ("ts", "source_path", "source_line")
_ALL = "_all"  # a constant grouping column, so that grouping by nothing needs no special case


class SqlReader(Protocol):
    """What facts (StoreReader) and rules (RuleContext) both offer."""

    def sql(self, query: str, params: Sequence[Any] | None = None) -> pl.DataFrame: ...


def samples(reader: SqlReader, metric: str, suffix: str | None = None) -> pl.DataFrame:
    """metric_samples rows of one canonical metric (optionally one suffix), in series order."""
    where, params = "metric = ?", [metric]
    if suffix is not None:
        where += " AND suffix = ?"
        params.append(suffix)
    return reader.sql(
        f"SELECT * FROM metric_samples WHERE {where} "
        "ORDER BY replica, engine, series, le, ts NULLS FIRST, source_path, source_line",
        params,
    )


def blocks_in_use(usage: pl.Expr, num_gpu_blocks: int) -> pl.Expr:
    """KV blocks held, from a kv_cache_usage value (vLLM).

    vLLM holds one null block back and measures usage against `num_gpu_blocks - 1`
    (the real runs: usage values are multiples of 1/67 for 68 blocks), so a full pool is
    num_gpu_blocks - 1 blocks, not num_gpu_blocks.
    """
    return (usage * (num_gpu_blocks - 1)).round(0)


def quantile_column(q: float) -> str:
    """Column name of a quantile in histogram_quantiles' output: 0.95 -> 'p95'."""
    return f"p{q * 100:g}"


def _keys(frame: pl.DataFrame, keys: Sequence[str]) -> list[str]:
    return [k for k in keys if k in frame.columns]


def _ordered(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    # Stable: rows that tie (a frame without path and line, read in that order) keep theirs.
    order = [*keys, *_keys(frame, _ORDER)]
    return frame.filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan()).sort(
        order, nulls_last=False, maintain_order=True
    )


def counter_deltas(frame: pl.DataFrame, extra: Sequence[str] = ()) -> pl.DataFrame:
    """Every sample with its increase since the previous sample of its series.

    Adds `increase` (null for a series' first sample), `reset` (the counter dropped),
    `seconds` since the previous sample and `rate` (increase per second). `extra` adds
    grouping columns (`le` for histogram buckets).
    """
    keys = [*_keys(frame, [*SERIES, *extra]), _ALL]
    ordered = _ordered(frame.with_columns(pl.lit(0).alias(_ALL)), keys)
    if "ts" not in ordered.columns:
        ordered = ordered.with_columns(pl.lit(None, pl.Datetime("us")).alias("ts"))
    prev = pl.col("value").shift(1).over(keys)
    reset = pl.col("value") < prev
    increase = pl.when(prev.is_null()).then(None).when(reset).then(pl.col("value"))
    seconds = (pl.col("ts") - pl.col("ts").shift(1).over(keys)).dt.total_microseconds() / 1e6
    return (
        ordered.with_columns(
            increase.otherwise(pl.col("value") - prev).alias("increase"),
            reset.fill_null(False).alias("reset"),
            seconds.alias("seconds"),
        )
        .with_columns(
            pl.when(pl.col("seconds") > 0)
            .then(pl.col("increase") / pl.col("seconds"))
            .alias("rate")
        )
        .drop(_ALL)
    )


def counter_totals(frame: pl.DataFrame, by: Sequence[str] = SERIES) -> pl.DataFrame:
    """Per group: first_ts, last_ts, samples, resets, increase and rate over the span.

    `rate` is the increase per second between the first and last sample (null when the
    span is unknown or zero).
    """
    deltas = counter_deltas(frame).with_columns(pl.lit(0).alias(_ALL))
    per_series = deltas.group_by(_keys(deltas, [*SERIES, _ALL]), maintain_order=True).agg(
        *_span(),
        pl.len().alias("samples"),
        pl.col("reset").sum().alias("resets"),
        pl.when(pl.len() == 1)
        .then(pl.col("value").first())
        .otherwise(pl.col("increase").sum())
        .alias("increase"),
    )
    group = _keys(per_series, by)
    totals = per_series.group_by([*group, _ALL], maintain_order=True).agg(
        pl.col("first_ts").min(),
        pl.col("last_ts").max(),
        pl.col("samples").sum(),
        pl.col("resets").sum(),
        pl.col("increase").sum(),
    )
    seconds = (pl.col("last_ts") - pl.col("first_ts")).dt.total_microseconds() / 1e6
    return totals.with_columns(
        pl.when(seconds > 0).then(pl.col("increase") / seconds).alias("rate")
    ).select(*group, "first_ts", "last_ts", "samples", "resets", "increase", "rate")


def _span() -> list[pl.Expr]:
    return [pl.col("ts").min().alias("first_ts"), pl.col("ts").max().alias("last_ts")]


def counter_increase(frame: pl.DataFrame) -> float:
    """Total increase of a counter over its samples: every series' increase, summed."""
    if frame.is_empty():
        return 0.0
    return float(counter_totals(frame, by=())["increase"].sum())


def counter_rate(
    frame: pl.DataFrame, window: timedelta, by: Sequence[str] = SERIES
) -> pl.DataFrame:
    """Rolling increase and rate: at each sample time, over the trailing `window`.

    One row per group and time with `increase` (over the window) and `rate` (that increase
    divided by the seconds the window's sample intervals cover). Samples without a time
    are left out.
    """
    deltas = counter_deltas(frame.filter(pl.col("ts").is_not_null())).with_columns(
        pl.lit(0).alias(_ALL)
    )
    group = [*_keys(deltas, by), _ALL]
    per_time = deltas.group_by([*group, "ts"], maintain_order=True).agg(
        pl.col("increase").fill_null(0).sum(), pl.col("seconds").fill_null(0).max()
    )
    rolled = _rolling_sum(per_time.sort([*group, "ts"]), ["increase", "seconds"], window, group)
    return rolled.with_columns(
        pl.when(pl.col("seconds") > 0).then(pl.col("increase") / pl.col("seconds")).alias("rate")
    ).drop(_ALL)


def _rolling_sum(
    frame: pl.DataFrame, columns: list[str], window: timedelta, group: list[str]
) -> pl.DataFrame:
    return frame.with_columns(
        pl.col(c).rolling_sum_by("ts", window_size=window).over(group) for c in columns
    )


def histogram_quantiles(
    frame: pl.DataFrame,
    quantiles: Sequence[float] = QUANTILES,
    window: timedelta | None = None,
    by: Sequence[str] = SERIES,
) -> pl.DataFrame:
    """Quantiles of a histogram from its `_bucket` samples (other suffixes are ignored).

    Without `window`: one row per group over the whole span (bucket increases from the
    first to the last sample), with first_ts, last_ts, `count` (observations) and one
    column per quantile (`p50`, `p95`, `p99`). With `window`: one row per group and sample
    time, over the trailing window (like `histogram_quantile(q, increase(x_bucket[w]))`).
    """
    buckets = frame.filter(pl.col("le").is_not_null())
    if "suffix" in buckets.columns:
        buckets = buckets.filter(pl.col("suffix") == "bucket")
    deltas = counter_deltas(buckets, extra=("le",)).with_columns(pl.lit(0).alias(_ALL))
    group = [*_keys(deltas, by), _ALL]
    if window is None:
        per_le = _whole_window(deltas, group)
        spans = per_le.group_by(group, maintain_order=True).agg(
            pl.col("first_ts").min(), pl.col("last_ts").max()
        )
        out = spans.join(_bucket_quantiles(per_le, group, quantiles), on=group, how="left")
    else:
        timed = deltas.filter(pl.col("ts").is_not_null())
        per_le = timed.group_by([*group, "le", "ts"], maintain_order=True).agg(
            pl.col("increase").fill_null(0).sum().alias("count")
        )
        rolled = _rolling_sum(per_le.sort([*group, "le", "ts"]), ["count"], window, [*group, "le"])
        out = _bucket_quantiles(rolled, [*group, "ts"], quantiles).sort([*group, "ts"])
    return out.drop(_ALL)


def _whole_window(deltas: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Per group and bound: observations over the span (a lone sample counts in full)."""
    series = _keys(deltas, [*SERIES, "le", _ALL])
    per_series = deltas.group_by(series, maintain_order=True).agg(
        *_span(),
        pl.when(pl.len() == 1)
        .then(pl.col("value").first())
        .otherwise(pl.col("increase").sum())
        .alias("count"),
    )
    return per_series.group_by([*group, "le"], maintain_order=True).agg(
        pl.col("count").sum(), pl.col("first_ts").min(), pl.col("last_ts").max()
    )


def _bucket_quantiles(
    buckets: pl.DataFrame, group: list[str], quantiles: Sequence[float]
) -> pl.DataFrame:
    """histogram_quantile over cumulative (le, count) rows, for every group at once."""
    f = (
        buckets.group_by([*group, "le"])
        .agg(pl.col("count").sum())  # equal bounds merged
        .sort([*group, "le"])
        .with_columns(pl.col("count").cum_max().over(group))  # forced monotonicity
        .with_columns(
            pl.int_range(pl.len()).over(group).alias("_i"),
            pl.len().over(group).alias("_n"),
            pl.col("count").last().over(group).alias("_total"),
            pl.col("le").last().over(group).alias("_top"),
            pl.col("le").shift(1).over(group).alias("_prev_le"),
            pl.col("count").shift(1).over(group).alias("_prev_count"),
        )
    )
    stats = f.group_by(group, maintain_order=True).agg(
        pl.col("_total").first().alias("count"),
        pl.col("_n").first(),
        pl.col("_top").first(),
        pl.col("_prev_le").last().alias("_second_le"),
    )
    for q in quantiles:
        col = quantile_column(q)
        stats = stats.join(_rank_bucket(f, group, q, f"_{col}"), on=group, how="left")
        stats = stats.with_columns(_finish(q, f"_{col}").alias(col)).drop(f"_{col}")
    return stats.drop("_n", "_top", "_second_le")


def _rank_bucket(f: pl.DataFrame, group: list[str], q: float, col: str) -> pl.DataFrame:
    """The interpolated value in the first non-+Inf bucket holding rank q x total."""
    rank = q * pl.col("_total")
    first = pl.col("_i") == 0
    start = pl.when(first).then(0.0).otherwise(pl.col("_prev_le"))
    below = pl.when(first).then(0.0).otherwise(pl.col("_prev_count"))
    inner = (
        pl.when(first & (pl.col("le") <= 0))
        .then(pl.col("le"))
        .otherwise(start + (pl.col("le") - start) * ((rank - below) / (pl.col("count") - below)))
    )
    hit = f.filter((pl.col("_i") < pl.col("_n") - 1) & (pl.col("count") >= rank))
    return hit.group_by(group, maintain_order=True).agg(inner.first().alias(col))


def _finish(q: float, col: str) -> pl.Expr:
    """Prometheus' special cases around the interpolated value."""
    if q != q:  # NaN
        return pl.lit(float("nan"))
    if q < 0:
        return pl.lit(float("-inf"))
    if q > 1:
        return pl.lit(float("inf"))
    return (
        pl.when((pl.col("_top") != float("inf")) | (pl.col("_n") < 2) | (pl.col("count") == 0))
        .then(pl.lit(float("nan")))
        .when(pl.col(col).is_null())
        .then(pl.col("_second_le"))  # the rank lies in the +Inf bucket
        .otherwise(pl.col(col))
    )
