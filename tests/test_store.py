"""The store's memory limit: low while storing, raised (not failed) when a query needs more."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest

from kvdiag.analyzer import store as store_module
from kvdiag.analyzer.store import Store

# A million 100-character strings sorted and returned whole: ~130 MB, well over 4 MB.
WIDE_SORT = (
    "SELECT range AS i, repeat('x', 100) || range::VARCHAR AS t FROM range(1000000) ORDER BY t DESC"
)


def test_a_query_over_the_memory_limit_runs_again_with_a_raised_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "MEMORY_LIMIT_MB", 4)
    store = Store()
    try:
        reader = store.reader
        frame = reader.sql(WIDE_SORT)
        assert frame.height == 1_000_000
        assert frame["t"][0] == "x" * 100 + "999999"
        assert (
            store_module.MEMORY_LIMIT_MB < store._memory.peak_mb <= store_module.MEMORY_CEILING_MB
        )
        assert store._memory.mb == store_module.MEMORY_LIMIT_MB  # back down afterwards
    finally:
        store.finish()


def test_past_the_ceiling_the_out_of_memory_error_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "MEMORY_LIMIT_MB", 4)
    monkeypatch.setattr(store_module, "MEMORY_CEILING_MB", 4)
    store = Store()
    try:
        with pytest.raises(duckdb.OutOfMemoryException):
            store.reader.sql(WIDE_SORT)
    finally:
        store.finish()


def test_an_insert_retried_after_running_out_of_memory_adds_each_row_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "MEMORY_LIMIT_MB", 4)
    store = Store()
    try:
        rows = 300_000
        frame = pl.DataFrame(
            {
                "path": [f"{'p' * 60}{i}" for i in range(rows)],
                "line": list(range(rows)),
                "message": ["m" * 40] * rows,
            }
        )
        store.append("input_problems", frame)
        assert store._memory.peak_mb > 4  # the insert did run out of memory
        assert store.reader.scalar("SELECT count(*) FROM input_problems") == rows
    finally:
        store.finish()
