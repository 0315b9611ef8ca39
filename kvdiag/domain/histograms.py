"""Histogram quantiles from Prometheus `_bucket` counters, as PromQL computes them.

`bucket_quantiles` is the one interpolation: over cumulative (le, count) rows per group,
buckets sorted by `le`, equal bounds merged, counts made monotonic, linear interpolation
inside the bucket that holds the rank q x total (0 as the lower bound of the first bucket
when it is positive, the bound itself when it is not), the second-highest bound when the
rank falls in the +Inf bucket, NaN without observations, without a +Inf bucket or with
fewer than two buckets. (Prometheus' 1e-12 float-precision correction is not applied.)

`histogram_quantiles` feeds it from bucket samples: each bound's increase over the span or
a trailing window, across restarts (kvdiag.domain.counters), as
`histogram_quantile(q, sum by (...) (increase(x_bucket[w])))` would.

`bucket_quantile_sql` is the same interpolation as SQL text, for the charts: a day of
one-second scrapes is two million windowed bucket counts a histogram, which are cheaper
to reduce where they are computed than to hand over. Tests hold the two to each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import polars as pl

from kvdiag.domain.counters import SERIES, counter_rate, counter_totals

QUANTILES = (0.5, 0.95, 0.99)
_ALL = "_all"  # a constant grouping column, so that grouping by nothing needs no special case


def quantile_column(q: float) -> str:
    """Column name of a quantile in the output: 0.95 -> 'p95'."""
    return f"p{q * 100:g}"


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
    if window is not None:
        rolled = counter_rate(buckets, window, by, extra=("le",)).rename({"increase": "count"})
        group = [k for k in by if k in rolled.columns]
        return bucket_quantiles(rolled, [*group, "ts"], quantiles).sort([*group, "ts"])
    per_le = counter_totals(buckets, by, extra=("le",)).rename({"increase": "count"})
    group = [k for k in by if k in per_le.columns]
    spans = (
        per_le.with_columns(pl.lit(0).alias(_ALL))
        .group_by([*group, _ALL], maintain_order=True)
        .agg(pl.col("first_ts").min(), pl.col("last_ts").max())
    )
    found = bucket_quantiles(per_le, group, quantiles).with_columns(pl.lit(0).alias(_ALL))
    return spans.join(found, on=[*group, _ALL], how="left").drop(_ALL)


def bucket_quantile(q: float, buckets: pl.DataFrame) -> float:
    """The q-quantile of one histogram's cumulative (le, count) rows (NaN without rows)."""
    found = bucket_quantiles(buckets, [], (q,))[quantile_column(q)]
    return float(found[0]) if found.len() else float("nan")


def bucket_quantiles(
    buckets: pl.DataFrame, group: Sequence[str], quantiles: Sequence[float]
) -> pl.DataFrame:
    """histogram_quantile over cumulative (le, count) rows, for every group at once.

    One row per group with `count` (observations) and a column per quantile.
    """
    keys = [*group, _ALL]
    f = (
        buckets.with_columns(pl.lit(0).alias(_ALL))
        .group_by([*keys, "le"])
        .agg(pl.col("count").sum())  # equal bounds merged
        .sort([*keys, "le"])
        .with_columns(pl.col("count").cum_max().over(keys))  # forced monotonicity
        .with_columns(
            pl.int_range(pl.len()).over(keys).alias("_i"),
            pl.len().over(keys).alias("_n"),
            pl.col("count").last().over(keys).alias("_total"),
            pl.col("le").last().over(keys).alias("_top"),
            pl.col("le").shift(1).over(keys).alias("_prev_le"),
            pl.col("count").shift(1).over(keys).alias("_prev_count"),
        )
    )
    stats = f.group_by(keys, maintain_order=True).agg(
        pl.col("_total").first().alias("count"),
        pl.col("_n").first(),
        pl.col("_top").first(),
        pl.col("_prev_le").last().alias("_second_le"),
    )
    for q in quantiles:
        col = quantile_column(q)
        stats = stats.join(_rank_bucket(f, keys, q, f"_{col}"), on=keys, how="left")
        stats = stats.with_columns(_finish(q, f"_{col}").alias(col)).drop(f"_{col}")
    return stats.drop("_n", "_top", "_second_le", _ALL)


def _rank_bucket(f: pl.DataFrame, keys: list[str], q: float, col: str) -> pl.DataFrame:
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
    return hit.group_by(keys, maintain_order=True).agg(inner.first().alias(col))


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


def bucket_quantile_sql(q: float, buckets: str, group: Sequence[str], merged: bool = False) -> str:
    """SQL: bucket_quantiles' q-quantile of a query of cumulative (group..., le, c) rows.

    One row per group: (group..., count, value), value NULL where PromQL gives NaN. The
    query may name CTEs of an enclosing WITH; `group` must name at least one column.
    `merged`: the query holds one row per group and bound already (its own GROUP BY merged
    equal bounds), so the merge, a pass over every row, is left out.

    Counts are made monotonic without a running maximum of every bucket: the first bucket
    whose monotonic count reaches the rank is the first whose own count does, its monotonic
    count is its own, and the one below it is the most any lower bucket counted (`below`).
    """
    if not 0 <= q <= 1 or not group:
        raise ValueError(f"quantile {q} of {list(group)}: needs 0 <= q <= 1 and a group")
    g = ", ".join(group)
    merge = buckets if merged else f"SELECT {g}, le, sum(c) AS c FROM ({buckets}) GROUP BY {g}, le"
    rank = f"{q!r} * total"
    start = "coalesce(lo, 0)"
    inside = (
        f"CASE WHEN lo IS NULL AND le <= 0 THEN le ELSE {start} + (le - {start}) "
        f"* ({rank} - coalesce(below, 0)) / (c - coalesce(below, 0)) END"
    )
    finite = "le < 'inf'::DOUBLE"
    return f"""
WITH merged AS ({merge}),
ranked AS (
  SELECT {g}, le, c, lag(le) OVER w AS lo,
         max(c) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS below,
         max(c) OVER (PARTITION BY {g}) AS total
  FROM merged WINDOW w AS (PARTITION BY {g} ORDER BY le))
SELECT {g}, max(c) AS count,
       CASE WHEN max(le) < 'inf'::DOUBLE OR count(*) < 2 OR max(c) = 0 THEN NULL
            ELSE coalesce(arg_min({inside}, le) FILTER (WHERE {finite} AND c >= {rank}),
                          max(le) FILTER (WHERE {finite})) END AS value
FROM ranked GROUP BY {g}
"""
