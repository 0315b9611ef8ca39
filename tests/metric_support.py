"""Helpers for the metric tests: run the real discovery and ingesters over a folder, and read
raw exposition files independently of kvdiag's parser."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.base import Account, IngestContext, TableBatch
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND
from kvdiag.domain.records.diagnosis import InputProblem
from tests.conftest import FIXTURES

# The HELP and TYPE lines of a gauge the alias table knows, to put samples under.
HEAD = "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n"


@dataclass
class Ingested:
    """Everything the ingesters emitted for a folder, tables concatenated."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    accounts: list[Account] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # unit path -> kind

    def table(self, name: str) -> pl.DataFrame:
        return self.tables.get(name, pl.DataFrame())

    def account(self, path: str) -> Account:
        (acct,) = [a for a in self.accounts if a.path == path]
        return acct

    def account_of(self, kind: str) -> Account:
        """The one account of the one unit of this kind."""
        (rel,) = [rel for rel, k in self.kinds.items() if k == kind]
        return self.account(rel)


def ingest(root: Path) -> Ingested:
    """Discover `root` and run every unit through its ingester (no store, no rules)."""
    found = discover(root)
    ctx = IngestContext(found.root, None, found.anchor, found.anchor_source)
    parts: dict[str, list[pl.DataFrame]] = defaultdict(list)
    out = Ingested()
    for unit in found.units:
        out.kinds[unit.rel] = unit.kind
        for emit in INGESTERS_BY_KIND[unit.kind]().ingest(unit, ctx):
            if isinstance(emit, TableBatch):
                parts[emit.table].append(emit.rows())
            elif isinstance(emit, InputProblem):
                out.problems.append(emit)
            else:
                out.accounts.append(emit)
    out.tables = {name: pl.concat(frames, how="diagonal") for name, frames in parts.items()}
    return out


def copy_real_scrapes(root: Path, n: int) -> list[Path]:
    """The first `n` scrape files of the real saturation run copied into root/metrics;
    returns the originals."""
    scrapes = sorted((FIXTURES / "vllm-b-saturation" / "incident" / "metrics").glob("*.prom"))
    (root / "metrics").mkdir(parents=True, exist_ok=True)
    for src in scrapes[:n]:
        (root / "metrics" / src.name).write_bytes(src.read_bytes())
    return scrapes[:n]


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


_RAW_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def raw_samples(path: Path) -> dict[tuple[str, str], tuple[int, float]]:
    """(name, label text) -> (line, value) for the canonical sample lines of a file.

    Deliberately simple and independent of kvdiag: vLLM writes one sample per line as
    `name{labels} value`, so a line is split at its last space.
    """
    out = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        m = _RAW_SAMPLE.match(line)
        assert m, f"{path}:{number}: {line!r}"
        out[(m.group(1), m.group(2) or "")] = (number, float(m.group(3)))
    return out


def same_value(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b
