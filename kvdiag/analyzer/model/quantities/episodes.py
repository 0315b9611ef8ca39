"""Queue episodes: maximal runs of consecutive observations with requests waiting.

Layer-3 rules judge a queue by what the pool did *while it lasted*: a queue under a full
pool is saturation, a queue beside a pool with room is an admission limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from kvdiag.analyzer.model.queries import col_max, col_median


@dataclass(frozen=True, slots=True)
class Episode:
    """A run of `length` observations from `offset` of a time-ordered frame."""

    frame: pl.DataFrame
    offset: int
    length: int

    @property
    def rows(self) -> pl.DataFrame:
        """The observations, in time order (a view: slices are not copies)."""
        return self.frame.slice(self.offset, self.length)

    @property
    def start(self) -> datetime | None:
        value: datetime | None = self.rows["ts"][0]
        return value

    @property
    def end(self) -> datetime | None:
        value: datetime | None = self.rows["ts"][-1]
        return value

    @property
    def peak_usage(self) -> float:
        return col_max(self.rows, "usage")

    @property
    def median_usage(self) -> float:
        return col_median(self.rows, "usage")

    @property
    def max_waiting(self) -> int:
        return int(col_max(self.rows, "waiting"))

    @property
    def max_running(self) -> int:
        return int(col_max(self.rows, "running"))

    def row_of_max(self, column: str) -> dict[str, Any]:
        top = self.rows[column].max()
        return self.rows.filter(pl.col(column) == top).row(0, named=True)


def episodes(points: pl.DataFrame, min_waiting: float) -> list[Episode]:
    """Queue episodes of one replica from one source (pass metrics or log points, not both)."""
    if points.is_empty():
        return []
    ordered = by_time(points)
    queued = ordered["waiting"].fill_null(0) >= min_waiting
    # +1 where a run of queued observations starts, -1 just past where it ends; a day of
    # stats lines holds tens of thousands of runs, found here without a Python loop.
    edges = pl.concat([pl.Series([False]), queued, pl.Series([False])]).cast(pl.Int8).diff()
    edges = edges.slice(1)
    starts = (edges == 1).arg_true().to_list()
    ends = (edges == -1).arg_true().to_list()
    return [Episode(ordered, s, e - s) for s, e in zip(starts, ends, strict=True)]


def best_source(points: pl.DataFrame) -> pl.DataFrame:
    """Scrapes when there are any (finer grained), else the stats lines."""
    if points["origin"].n_unique() <= 1:
        return points  # one source: no copy (a day of stats lines is millions of rows)
    scraped = points.filter(pl.col("origin") == "metrics")
    return scraped if scraped.height else points.filter(pl.col("origin") == "log")


def by_time(points: pl.DataFrame) -> pl.DataFrame:
    """The rows in time order (stable, undated rows last); no copy when already so."""
    ts = points["ts"]
    if not ts.null_count() and ts.is_sorted():
        return points
    return points.sort("ts", nulls_last=True, maintain_order=True)
