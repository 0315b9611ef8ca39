"""Shared read queries for rules: metric series by canonical name, counter increases,
histogram means. Rules ask for canonical names only (see metric_aliases.toml)."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdiag.analyzer.timeseries import counter_increase
from kvdiag.rules.base import RuleContext

__all__ = ["counter", "counter_increase", "first_max", "gauge", "histogram_mean"]

_SAMPLE_COLS = "replica, engine, ts, value, reason, le, source_path, source_line, raw"


def gauge(ctx: RuleContext, metric: str, reason: str | None = None) -> pl.DataFrame:
    """Samples of a gauge, ordered by replica and time."""
    where = "metric = ? AND suffix = ''"
    params: list[Any] = [metric]
    if reason is not None:
        where += " AND reason = ?"
        params.append(reason)
    return ctx.sql(
        f"SELECT {_SAMPLE_COLS} FROM metric_samples WHERE {where} "
        "ORDER BY replica, engine, ts NULLS FIRST, source_path, source_line",
        params,
    )


def counter(ctx: RuleContext, metric: str) -> pl.DataFrame:
    """Samples of a counter (`_total`), ordered by replica and time."""
    return ctx.sql(
        f"SELECT {_SAMPLE_COLS} FROM metric_samples WHERE metric = ? AND suffix = 'total' "
        "ORDER BY replica, engine, ts NULLS FIRST, source_path, source_line",
        [metric],
    )


def histogram_mean(ctx: RuleContext, metric: str) -> tuple[float, int] | None:
    """(mean, count) of a histogram at its last sample per series, or None."""
    frame = ctx.sql(
        "WITH last AS (SELECT replica, engine, suffix, arg_max(value, ts) AS v "
        "FROM metric_samples WHERE metric = ? AND suffix IN ('sum', 'count') "
        "GROUP BY replica, engine, suffix) "
        "SELECT sum(v) FILTER (WHERE suffix = 'sum') AS s, "
        "sum(v) FILTER (WHERE suffix = 'count') AS c FROM last",
        [metric],
    )
    s, c = frame.row(0) if frame.height else (None, None)
    if not c:
        return None
    return float(s) / float(c), int(c)


def first_max(frame: pl.DataFrame, column: str) -> dict[str, Any] | None:
    """The first row holding the column's maximum (the moment it was first reached)."""
    if frame.height == 0 or frame[column].drop_nulls().len() == 0:
        return None
    top = frame[column].max()
    return frame.filter(pl.col(column) == top).row(0, named=True)
