"""Run one ingester on one file, as the pipeline would, and collect what it emits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kvdiag.analyzer.discovery.discover import classify_file
from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND
from kvdiag.analyzer.text.lines import read_head
from kvdiag.domain.records.diagnosis import InputProblem


@dataclass
class Ingested:
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    accounts: list[Account] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)

    @property
    def account(self) -> Account:
        assert len(self.accounts) == 1, self.accounts
        return self.accounts[0]

    def table(self, name: str) -> pl.DataFrame:
        return self.tables.get(name, pl.DataFrame())


def kind_of(path: Path) -> str | None:
    """The ingester discovery picks for a file, by content."""
    ingester, _ = classify_file(path.name, read_head(path))
    return ingester.kind if ingester else None


def ingest(path: Path, kind: str | None = None, replica: str = "default") -> Ingested:
    """Ingest `path` with `kind` (default: what discovery recognises it as)."""
    kind = kind or kind_of(path)
    assert kind is not None, f"{path.name}: not recognised"
    unit = InputUnit(kind, path.name, (path,), (path.name,), path.stat().st_size, replica)
    out = Ingested()
    for emit in INGESTERS_BY_KIND[kind]().ingest(
        unit, IngestContext(path.parent, None, None, None)
    ):
        if isinstance(emit, TableBatch):
            prev = out.tables.get(emit.table)
            frame = emit.rows()
            out.tables[emit.table] = frame if prev is None else pl.concat([prev, frame])
        elif isinstance(emit, InputProblem):
            out.problems.append(emit)
        else:
            out.accounts.append(emit)
    return out


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
