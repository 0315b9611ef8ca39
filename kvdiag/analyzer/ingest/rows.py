"""Rows built in Python (small structured inputs) as frames typed like their declared table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from kvdiag.analyzer.ingest.lines import open_binary
from kvdiag.analyzer.schema import table

_POLARS: dict[str, Any] = {
    "VARCHAR": pl.String,
    "INTEGER": pl.Int32,
    "BIGINT": pl.Int64,
    "DOUBLE": pl.Float64,
    "BOOLEAN": pl.Boolean,
    "TIMESTAMP": pl.Datetime("us"),
}
MAX_RAW = 4096
MAX_SMALL_FILE = 8 << 20  # config.json, launch flags: read whole, refuse anything larger


def frame_for(table_name: str, rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """A frame with every declared column of `table_name` (absent keys become NULL).

    Typing the columns up front keeps an all-NULL column (no UUIDs in a table snapshot ...)
    from arriving as polars' Null type, and a stray key fails here, not in the store.
    """
    columns = table(table_name).columns
    declared = {c.name for c in columns}
    for row in rows:
        extra = set(row) - declared
        if extra:
            raise ValueError(f"{table_name}: undeclared columns {sorted(extra)}")
    schema = {c.name: _POLARS[c.type] for c in columns}
    data = {c.name: [row.get(c.name) for row in rows] for c in columns}
    return pl.DataFrame(data, schema=schema)


def clean_raw(text: str) -> str:
    """A line as stored in `raw`: control characters dropped, trailing space trimmed, capped."""
    return "".join(ch for ch in text if ch >= " " or ch == "\t").rstrip()[:MAX_RAW]


def read_text(path: Path, limit: int = MAX_SMALL_FILE) -> tuple[str, bool]:
    """A small text file decoded (gzip transparent); True when it was cut at `limit`."""
    with open_binary(path) as fh:
        data = fh.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


def count_lines(text: str) -> int:
    """Lines as `grep -c ''` counts them (a last line without a newline still counts)."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)
