"""Helpers shared by the fact finders."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdiag.analyzer.model import Fact, SourceRef

Facts = dict[str, Fact | tuple[Fact, ...]]


def ref(row: dict[str, Any]) -> SourceRef:
    line = row.get("source_line")
    return SourceRef(str(row["source_path"]), int(line) if line is not None else None)


def scoped(rows: list[tuple[str, Fact]]) -> Fact | tuple[Fact, ...]:
    """One fact when there is one replica, else one per replica scoped by name."""
    if len(rows) == 1:
        return rows[0][1]
    return tuple(
        Fact(f.value, f.unit, f.source, f.note, (("replica", replica),)) for replica, f in rows
    )


def first_per_replica(frame: pl.DataFrame) -> list[dict[str, Any]]:
    if frame.is_empty():
        return []
    return frame.unique(subset=["replica"], keep="first", maintain_order=True).to_dicts()
