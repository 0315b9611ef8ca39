"""metric_samples rows of one metric, for the domain's counter and histogram arithmetic.

Typed by what it needs, so facts (StoreReader), the verdict and rules (RuleContext) share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import polars as pl


class SqlReader(Protocol):
    """What facts (StoreReader) and rules (RuleContext) both offer."""

    def sql(self, query: str, params: Sequence[Any] | None = None) -> pl.DataFrame: ...

    def has_rows(self, table_name: str) -> bool: ...

    def empty(self, table_name: str) -> pl.DataFrame: ...


def samples(reader: SqlReader, metric: str, suffix: str | None = None) -> pl.DataFrame:
    """metric_samples rows of one canonical metric (optionally one suffix), in series order."""
    where, params = "metric = ?", [metric]
    if suffix is not None:
        where += " AND suffix = ?"
        params.append(suffix)
    if not reader.has_rows("metric_samples"):
        return reader.empty("metric_samples")  # no scrape read: no query per metric
    return reader.sql(
        f"SELECT * FROM metric_samples WHERE {where} "
        "ORDER BY replica, engine, series, le, ts NULLS FIRST, source_path, source_line",
        params,
    )
