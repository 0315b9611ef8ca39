"""Queue episodes: maximal runs of consecutive observations with requests waiting.

Layer-3 rules judge a queue by what the pool did *while it lasted*: a queue under a full
pool is saturation, a queue beside a pool with room is an admission limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from kvdiag.rules.queries import col_max, col_median


@dataclass(frozen=True, slots=True)
class Episode:
    rows: pl.DataFrame  # the observations, in time order

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
    ordered = points.sort("ts", nulls_last=True, maintain_order=True)
    queued = (ordered["waiting"].fill_null(0) >= min_waiting).to_list()
    out: list[Episode] = []
    start: int | None = None
    for i, flag in enumerate([*queued, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append(Episode(ordered.slice(start, i - start)))
            start = None
    return out


def best_source(points: pl.DataFrame) -> pl.DataFrame:
    """Scrapes when there are any (finer grained), else the stats lines."""
    scraped = points.filter(pl.col("origin") == "metrics")
    return scraped if scraped.height else points.filter(pl.col("origin") == "log")
