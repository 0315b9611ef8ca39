"""Helpers shared by the fact finders."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdiag.domain.records.diagnosis import Fact, SourceRef

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


def scoped_by(
    rows: list[tuple[dict[str, str], Fact]], keep: tuple[str, ...] = ()
) -> Fact | tuple[Fact, ...]:
    """One fact per scope (replica, engine). A scope key all facts share the value of is left
    out, as it tells them nothing apart, unless `keep` names it (a folder of two engines says
    which one a fact is about even when only one of them stated it)."""
    keys = [k for k in ("replica", "engine") if k in keep or len({r[0].get(k) for r in rows}) > 1]
    if not keys and len(rows) == 1:
        return rows[0][1]
    return tuple(
        Fact(f.value, f.unit, f.source, f.note, tuple((k, scope[k]) for k in keys))
        for scope, f in rows
    )
