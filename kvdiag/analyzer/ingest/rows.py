"""Rows built in Python (small structured inputs) as frames typed like their declared table."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from kvdiag.analyzer.ingest.lines import open_binary
from kvdiag.analyzer.model import UnmatchedTemplate
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
# The same masks as base.template_expr: ids and hex first, then every number.
_IDS = re.compile(r"0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*")
_NUMBERS = re.compile(r"\d+(?:[.,:]\d+)*")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
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
    return _CONTROL.sub("", text).rstrip()[:MAX_RAW]


def read_text(path: Path, limit: int = MAX_SMALL_FILE) -> tuple[str, bool]:
    """A small text file decoded (gzip transparent); True when it was cut at `limit`."""
    with open_binary(path) as fh:
        data = fh.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


def count_lines(text: str) -> int:
    """Lines as `grep -c ''` counts them (a last line without a newline still counts)."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def templates(unmatched: Sequence[tuple[int, str]], top: int = 20) -> tuple[UnmatchedTemplate, ...]:
    """Unmatched lines grouped by shape (ids and numbers masked), most frequent first."""
    groups: dict[str, list[Any]] = {}
    for line_no, text in unmatched:
        shape = _NUMBERS.sub("<N>", _IDS.sub("<N>", text[:160]))
        group = groups.setdefault(shape, [0, line_no, clean_raw(text)[:300]])
        group[0] += 1
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[1][1]))[:top]
    return tuple(UnmatchedTemplate(t, n, first, ex) for t, (n, first, ex) in ranked)
