"""Counter increases and rates from metric samples, across process restarts.

The functions take polars frames of metric_samples rows (any frame with `value`, `ts` and
some of the series columns) and compute per series: replica, engine and the labels other
than `le` (the `series` column). Columns a frame lacks are left out of the grouping. `by`
chooses the output grouping; it may be coarser than a series (`("replica",)` adds up a
replica's engines), in which case increases are computed per series first and then summed,
as `sum by (replica) (increase(...))` would. `extra` names grouping columns kept in both
(`le` for histogram buckets, each bound being a counter of its own).

An increase is the difference to the previous sample of the same series; a drop means the
process restarted and the counter began again from zero, so the new value counts in full
(Prometheus' reset rule). A series seen once has no window: its value, the count since the
process started, is the best available figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import polars as pl

SERIES = ("replica", "engine", "series")
_ORDER = ("ts", "source_path", "source_line")
_ALL = "_all"  # a constant grouping column, so that grouping by nothing needs no special case

# The reset rule as SQL over a `value` and the series' previous value `prev` (NULL at the
# series' first sample, which has no step), for queries that run where the samples are: a
# day of one-second scrapes is millions of samples, cheaper reduced there than handed over.
SQL_STEP_INCREASE = (
    "CASE WHEN prev IS NULL THEN 0 WHEN value >= prev THEN value - prev ELSE value END"
)


def series_increase_sql(samples: str, series: str, order: str = "ts NULLS FIRST") -> str:
    """SQL: each series' increase over a query of (series, ts, value) rows, as
    counter_totals computes it: steps by the reset rule, a lone sample counted in full.

    `series` names the series (a column), `order` its samples' order (`ts` first).
    """
    return f"""
SELECT {series},
       CASE WHEN count(*) = 1 THEN any_value(value) ELSE sum({SQL_STEP_INCREASE}) END
         AS increase
FROM (SELECT {series}, value, lag(value) OVER (PARTITION BY {series} ORDER BY {order}) AS prev
      FROM ({samples}) WHERE value IS NOT NULL AND NOT isnan(value))
GROUP BY {series}
"""


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
    `seconds` since the previous sample and `rate` (increase per second).
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


def counter_totals(
    frame: pl.DataFrame, by: Sequence[str] = SERIES, extra: Sequence[str] = ()
) -> pl.DataFrame:
    """Per group: first_ts, last_ts, samples, resets, increase and rate over the span.

    `rate` is the increase per second between the first and last sample (null when the
    span is unknown or zero).
    """
    deltas = counter_deltas(frame, extra).with_columns(pl.lit(0).alias(_ALL))
    per_series = deltas.group_by(_keys(deltas, [*SERIES, *extra, _ALL]), maintain_order=True).agg(
        pl.col("ts").min().alias("first_ts"),
        pl.col("ts").max().alias("last_ts"),
        pl.len().alias("samples"),
        pl.col("reset").sum().alias("resets"),
        pl.when(pl.len() == 1)
        .then(pl.col("value").first())
        .otherwise(pl.col("increase").sum())
        .alias("increase"),
    )
    group = _keys(per_series, [*by, *extra])
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


def counter_increase(frame: pl.DataFrame) -> float:
    """Total increase of a counter over its samples: every series' increase, summed."""
    if frame.is_empty():
        return 0.0
    return float(counter_totals(frame, by=())["increase"].sum())


def counter_rate(
    frame: pl.DataFrame,
    window: timedelta,
    by: Sequence[str] = SERIES,
    extra: Sequence[str] = (),
) -> pl.DataFrame:
    """Rolling increase and rate: at each sample time, over the trailing `window`.

    One row per group and time with `increase` (over the window) and `rate` (that increase
    divided by the seconds the window's sample intervals cover). Samples without a time
    are left out.
    """
    deltas = counter_deltas(frame.filter(pl.col("ts").is_not_null()), extra).with_columns(
        pl.lit(0).alias(_ALL)
    )
    group = [*_keys(deltas, [*by, *extra]), _ALL]
    per_time = deltas.group_by([*group, "ts"], maintain_order=True).agg(
        pl.col("increase").fill_null(0).sum(), pl.col("seconds").fill_null(0).max()
    )
    rolled = per_time.sort([*group, "ts"]).with_columns(
        pl.col(c).rolling_sum_by("ts", window_size=window).over(group)
        for c in ("increase", "seconds")
    )
    return rolled.with_columns(
        pl.when(pl.col("seconds") > 0).then(pl.col("increase") / pl.col("seconds")).alias("rate")
    ).drop(_ALL)
