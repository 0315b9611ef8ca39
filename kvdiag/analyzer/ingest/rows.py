"""Rows built in Python (small structured inputs) as frames typed like their declared table."""

from __future__ import annotations

import codecs
import json
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from kvdiag.analyzer.schema import table
from kvdiag.analyzer.schema.fieldtypes import INT64_SATURATED
from kvdiag.analyzer.text.lines import open_binary
from kvdiag.domain.records.diagnosis import UnmatchedTemplate

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
    # Integers are built 64 bits wide and saturated (as_int): the store narrows INTEGER
    # columns, and validate.py reports what does not fit.
    schema = {c.name: pl.Int64 if c.type == "INTEGER" else _POLARS[c.type] for c in columns}
    data = {
        c.name: [
            _saturated(row.get(c.name)) if c.type in _INTS else row.get(c.name) for row in rows
        ]
        for c in columns
    }
    return pl.DataFrame(data, schema=schema)


_INTS = ("INTEGER", "BIGINT")


def _saturated(value: Any) -> Any:
    return as_int(value) if isinstance(value, int) and not isinstance(value, bool) else value


def as_int(value: Any) -> int | None:
    """An integer column's value from JSON or text; None when it is no integer.

    Beyond 64 bits it saturates, as fieldtypes.py does for log fields, so the plausibility
    check (validate.py) reports the row instead of the frame failing to build.
    """
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: float infinity
        return None
    return max(-int(INT64_SATURATED), min(int(INT64_SATURATED), number))


def as_float(value: Any) -> float | None:
    """A float column's value from JSON or text (NaN and infinities kept for validate.py)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def clean_raw(text: str) -> str:
    """A line as stored in `raw`: control characters dropped, trailing space trimmed, capped."""
    return _CONTROL.sub("", text).rstrip()[:MAX_RAW]


class SmallText(NamedTuple):
    """A small file read whole: its text, and why it may be incomplete."""

    text: str
    cut: bool  # larger than the limit (once decompressed): only the first part was read
    broken: str | None  # why the stream ended early (a truncated or corrupt gzip)


def read_text(path: Path, limit: int = MAX_SMALL_FILE) -> SmallText:
    """A small text file decoded (gzip transparent, UTF-16 by its BOM), at most `limit` bytes.

    A stream that breaks off keeps what was read before the break.
    """
    chunks: list[bytes] = []
    size, broken = 0, None
    with open_binary(path) as fh:
        try:
            while size <= limit and (block := fh.read(min(1 << 20, limit + 1 - size))):
                chunks.append(block)
                size += len(block)
        except (OSError, EOFError, zlib.error) as exc:
            broken = f"stream ends early: {exc}"
    data = b"".join(chunks)
    return SmallText(_decode(data[:limit]), size > limit, broken)


def _decode(data: bytes) -> str:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.removeprefix(codecs.BOM_UTF8).decode("utf-8", errors="replace")


def load_json(
    small: SmallText, limit: int, parse: Callable[[str], Any] = json.loads
) -> tuple[Any, tuple[int | None, str] | None]:
    """The JSON document of a small file (as `parse` reads it: json.loads or one that raises
    its errors), or (line, message) saying why it cannot be read."""
    if small.cut:
        return None, (None, f"larger than {limit:,} bytes once decompressed: not read")
    try:
        return parse(small.text), None
    except json.JSONDecodeError as exc:  # at the end of a text ending in \n: its last line
        line = min(exc.lineno, max(count_lines(small.text), 1))
        return None, (line, f"not valid JSON: {exc.msg}")
    except RecursionError:
        return None, (None, "JSON nested deeper than can be read: not read")


def undecodable_lines(text: str) -> int:
    """Lines holding bytes that were not valid UTF-8 (decoded as U+FFFD)."""
    return sum(1 for line in text.split("\n") if "\ufffd" in line)


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
