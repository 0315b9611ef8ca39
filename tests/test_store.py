"""The store's memory limit: low while storing, raised (not failed) when a query needs more."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import polars as pl
import pytest

from kvdiag.analyzer import store as store_module
from kvdiag.analyzer.store import Store

TINY_MB = 4
# A million 100-character strings sorted and returned whole: ~130 MB, well over 4 MB.
WIDE_SORT = (
    "SELECT range AS i, repeat('x', 100) || range::VARCHAR AS t FROM range(1000000) ORDER BY t DESC"
)


@pytest.fixture
def tiny_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store whose DuckDB starts with a 4 MB limit, so ordinary work runs out of memory."""
    monkeypatch.setattr(store_module, "MEMORY_LIMIT_MB", TINY_MB)
    store = Store()
    try:
        yield store
    finally:
        store.finish()


def test_a_query_over_the_memory_limit_runs_again_with_a_raised_limit(tiny_store: Store) -> None:
    frame = tiny_store.reader.sql(WIDE_SORT)
    assert frame.height == 1_000_000
    assert frame["t"][0] == "x" * 100 + "999999"
    assert TINY_MB < tiny_store._memory.peak_mb <= store_module.MEMORY_CEILING_MB
    assert tiny_store._memory.mb == TINY_MB  # back down afterwards


def test_past_the_ceiling_the_out_of_memory_error_is_raised(
    tiny_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MEMORY_CEILING_MB", TINY_MB)
    with pytest.raises(duckdb.OutOfMemoryException):
        tiny_store.reader.sql(WIDE_SORT)


def test_an_insert_retried_after_running_out_of_memory_adds_each_row_once(
    tiny_store: Store,
) -> None:
    rows = 300_000
    frame = pl.DataFrame(
        {
            "path": [f"{'p' * 60}{i}" for i in range(rows)],
            "line": list(range(rows)),
            "message": ["m" * 40] * rows,
        }
    )
    tiny_store.append("input_problems", frame)
    assert tiny_store._memory.peak_mb > TINY_MB  # the insert did run out of memory
    assert tiny_store.reader.scalar("SELECT count(*) FROM input_problems") == rows
