"""What a quantity computation reads from: the store's reader or an Incident, alike.

The fact finders run on the store's reader before there is an incident; the quantities
(queries.py, quantities/) run on the incident the rules and the commands are given. Both
answer the same read queries.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

import polars as pl

T = TypeVar("T")
EXCERPT_CHARS = 240


class Reads(Protocol):
    """What a quantity computation asks of its source: the store's reader or an Incident."""

    def sql(
        self, query: str, params: Sequence[Any] | None = None, *, large_result: bool = False
    ) -> pl.DataFrame: ...

    def scalar(self, query: str, params: Sequence[Any] | None = None) -> Any: ...

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T: ...

    def has_rows(self, table_name: str) -> bool: ...

    def empty(self, table_name: str) -> pl.DataFrame: ...


def fmt_ts(value: Any) -> str | None:
    """A timestamp as ISO text (seconds), or None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(value)


def excerpt(raw: str | None) -> str:
    text = (raw or "").strip()
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"
