"""Whole-file inputs are read one ahead on a worker (kvdiag/analyzer/ingest/readahead.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.base import IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.readahead import ReadAhead
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND
from tests.conftest import FIXTURES

INCIDENT = FIXTURES / "gpu-shrunken-pool-a100-case-study" / "incident"


def _context(root: Path) -> tuple[list[InputUnit], IngestContext]:
    found = discover(root)
    return list(found.units), IngestContext(found.root, None, found.anchor, found.anchor_source)


def _comparable(emits: list[Any]) -> list[Any]:
    return [(e.table, e.frame.to_dicts()) if isinstance(e, TableBatch) else e for e in emits]


def test_read_ahead_gives_what_reading_in_place_gives() -> None:
    units, ctx = _context(INCIDENT)
    assert {u.kind for u in units} >= {"model_config", "nvidia_smi", "vllm_log"}
    in_place = [list(INGESTERS_BY_KIND[u.kind]().ingest(u, ctx)) for u in units]
    with ReadAhead(units, ctx) as reading:
        ahead = [list(reading.emits(i, ctx)) for i in range(len(units))]
    assert [_comparable(e) for e in ahead] == [_comparable(e) for e in in_place]


def test_the_next_whole_file_is_read_while_this_one_is_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    units, ctx = _context(INCIDENT)
    threads: dict[str, str] = {}
    whole = [u for u in units if INGESTERS_BY_KIND[u.kind].max_bytes is not None]
    for unit in whole:
        cls = INGESTERS_BY_KIND[unit.kind]
        monkeypatch.setattr(cls, "ingest", _recording(cls.ingest, threads))
    with ReadAhead(units, ctx) as reading:
        for i in range(len(units)):
            list(reading.emits(i, ctx))
    first = units[0].rel
    # Every whole file but a first one was read on the worker, ahead of its turn.
    assert {rel for rel, name in threads.items() if name.startswith("kvdiag-read-ahead")} == {
        u.rel for u in whole if u.rel != first
    }


def _recording(ingest: Any, threads: dict[str, str]) -> Any:
    def recorded(self: Any, unit: InputUnit, ctx: IngestContext) -> Iterator[Any]:
        threads[unit.rel] = threading.current_thread().name
        yield from ingest(self, unit, ctx)

    return recorded


def test_an_error_comes_after_the_emits_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """As when read in place: what was emitted is stored, then the reader's error."""
    units, ctx = _context(INCIDENT)
    i = next(k for k, u in enumerate(units) if u.kind == "nvidia_smi" and k > 0)
    batch = TableBatch("gpu_snapshots", pl.DataFrame({"gpu": [0]}))

    def broken(self: Any, unit: InputUnit, ctx: IngestContext) -> Iterator[Any]:
        yield batch
        raise ValueError("cut short")

    monkeypatch.setattr(INGESTERS_BY_KIND["nvidia_smi"], "ingest", broken)
    got: list[Any] = []
    with ReadAhead(units, ctx) as reading, pytest.raises(ValueError, match="cut short"):
        list(reading.emits(i - 1, ctx))  # starts reading unit i on the worker
        got.extend(reading.emits(i, ctx))
    assert got == [batch]


def test_leaving_stops_a_read_under_way_at_its_next_emit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the pipeline leaves the ReadAhead: the worker must not read on."""
    units, ctx = _context(INCIDENT)
    i = next(k for k, u in enumerate(units) if u.kind == "nvidia_smi" and k > 0)
    started, release, produced = threading.Event(), threading.Event(), []

    def slow(self: Any, unit: InputUnit, ctx: IngestContext) -> Iterator[Any]:
        for n in range(100):
            produced.append(n)
            yield TableBatch("gpu_snapshots", pl.DataFrame({"gpu": [n]}))
            started.set()
            release.wait(5)

    monkeypatch.setattr(INGESTERS_BY_KIND["nvidia_smi"], "ingest", slow)
    with ReadAhead(units, ctx) as reading:
        list(reading.emits(i - 1, ctx))  # starts reading unit i on the worker
        assert started.wait(5)
        future = reading._ahead[i]
    release.set()
    emits, error = future.result(timeout=5)
    assert error is None
    assert len(emits) == 1 and len(produced) == 2  # the emit after leaving was not kept
