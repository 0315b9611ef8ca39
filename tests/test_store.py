"""The store: its memory limit (low while storing, raised when a query needs more) and
appends gathered into few inserts, read back whole and in order."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from kvdiag.analyzer.store import database as store_module
from kvdiag.analyzer.store import memory as memory_module
from kvdiag.analyzer.store.database import Store

TINY_MB = 4
# A million 100-character strings sorted and returned whole: ~130 MB, well over 4 MB.
WIDE_SORT = (
    "SELECT range AS i, repeat('x', 100) || range::VARCHAR AS t FROM range(1000000) ORDER BY t DESC"
)


@contextmanager
def _store_with_tiny(monkeypatch: pytest.MonkeyPatch, limit: str) -> Iterator[Store]:
    for module in (store_module, memory_module):  # read where the store and the limit are
        if hasattr(module, limit):
            monkeypatch.setattr(module, limit, TINY_MB)
    store = Store()
    try:
        yield store
    finally:
        store.finish()


@pytest.fixture
def tiny_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store whose DuckDB starts with a 4 MB limit, so ordinary work runs out of memory."""
    with _store_with_tiny(monkeypatch, "MEMORY_LIMIT_MB") as store:
        yield store


def test_a_query_over_the_memory_limit_runs_again_with_a_raised_limit(tiny_store: Store) -> None:
    frame = tiny_store.reader.sql(WIDE_SORT)
    assert frame.height == 1_000_000
    assert frame["t"][0] == "x" * 100 + "999999"
    assert TINY_MB < tiny_store._memory.peak_mb <= memory_module.MEMORY_CEILING_MB
    assert tiny_store._memory.mb == TINY_MB  # back down afterwards


def test_the_store_is_written_under_a_lower_limit_than_it_is_read() -> None:
    store = Store()
    try:
        limit = "SELECT current_setting('memory_limit')"
        store.append("input_problems", _problems(0, 3))
        writing = store._con.execute(limit).fetchall()[0]
        assert store.reader.scalar("SELECT count(*) FROM input_problems") == 3
        reading = store._con.execute(limit).fetchall()[0]
        store.append("input_problems", _problems(3, 2))  # rows set aside come after reading
        assert store.reader.scalar("SELECT count(*) FROM input_problems") == 5
    finally:
        store.finish()
    assert writing is not None and reading is not None
    assert _mb(writing[0]) == pytest.approx(memory_module.APPEND_MEMORY_LIMIT_MB, abs=0.1)
    assert _mb(reading[0]) == pytest.approx(memory_module.MEMORY_LIMIT_MB, abs=0.1)


def _mb(setting: str) -> float:
    """A limit set as 'N MB' (10^6 bytes), as DuckDB reports it back ('61.0 MiB')."""
    number, unit = setting.split()
    return float(number) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit] / 1e6


def test_past_the_ceiling_the_out_of_memory_error_is_raised(
    tiny_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_module, "MEMORY_CEILING_MB", TINY_MB)
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


def _problems(first: int, n: int, **extra: object) -> pl.DataFrame:
    rows = {
        "path": [f"f{i}.log" for i in range(first, first + n)],
        "line": list(range(first, first + n)),
    }
    return pl.DataFrame(rows).with_columns(pl.lit(v).alias(k) for k, v in extra.items())


def test_small_appends_are_gathered_and_read_back_in_order() -> None:
    """Frames with different optional columns (one with a column of nulls only) become
    one insert; a reader sees every row, in append order, with each column's values."""
    store = Store()
    try:
        store.append("input_problems", _problems(0, 3))
        store.append("input_problems", _problems(3, 2, message="late"))
        store.append("input_problems", _problems(5, 1, message=None))
        assert store._pending  # nothing inserted yet: three small frames wait
        got = store.reader.sql("SELECT path, line, message FROM input_problems ORDER BY rowid")
        assert not store._pending
        assert got["line"].to_list() == list(range(6))
        assert got["message"].to_list() == [None, None, None, "late", "late", None]
    finally:
        store.finish()


def test_a_big_append_is_inserted_at_once_with_what_waits_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "FLUSH_ROWS", 10)
    store = Store()
    try:
        store.append("input_problems", _problems(0, 4))
        store.append("input_problems", _problems(4, 20))
        assert not store._pending
        lines = store.reader.sql("SELECT line FROM input_problems ORDER BY rowid")["line"]
        assert lines.to_list() == list(range(24))
    finally:
        store.finish()


def _held_bytes(strings: pl.Series) -> int:
    """Bytes of the buffers a string column holds (views count what they point into)."""
    return int(strings.to_arrow(compat_level=pl.CompatLevel.newest()).get_total_buffer_size())


def test_rows_waiting_for_their_insert_do_not_hold_the_text_they_were_cut_from() -> None:
    """A string sliced from a big batch shares its buffer; a waiting frame copies it out."""
    batch = pl.DataFrame({"path": ["x" * 200 + str(i) for i in range(50_000)]})
    cut = batch.head(3).with_columns(pl.col("path").str.slice(0, 20), pl.lit(1).alias("line"))
    store = Store()
    try:
        store.append("input_problems", cut)
        (waiting,) = store._pending["input_problems"]
        assert _held_bytes(cut["path"]) > 10_000_000  # the whole batch's text
        assert _held_bytes(waiting["path"]) < 1_000
        assert waiting["path"].to_list() == cut["path"].to_list()
    finally:
        store.finish()


def test_a_failed_insert_is_raised_by_the_flush_after_it_and_the_store_goes_on() -> None:
    """Gathered rows are inserted at the latest where the pipeline flushes after an input,
    so a failure is reported against that input; later inputs are stored."""
    store = Store()
    try:
        store.append("input_problems", pl.DataFrame({"path": ["bad.log"], "line": ["not a line"]}))
        with pytest.raises(duckdb.ConversionException):
            store.flush()
        store.append("input_problems", _problems(0, 2))
        store.flush()
        paths = store.reader.sql("SELECT path FROM input_problems ORDER BY rowid")["path"]
        assert paths.to_list() == ["f0.log", "f1.log"]
    finally:
        store.finish()


def test_has_rows_tells_empty_tables_and_views_from_filled_ones_and_rejects_unknown_names() -> None:
    store = Store()
    try:
        empty = store.reader
        assert not empty.has_rows("input_problems")
        assert not empty.has_rows("metric_samples")  # a view: its series and points are empty
        store.append("input_problems", _problems(0, 1))
        filled = store.reader  # a new reader: what the last one read stays as it was
        assert filled.has_rows("input_problems")
        assert not filled.has_rows("metric_samples")
        with pytest.raises(KeyError):
            filled.has_rows("input_problems; DROP TABLE scrapes")
    finally:
        store.finish()


def test_has_rows_is_answered_from_the_inserts_and_asks_duckdb_once_rows_were_set_aside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    scalar = store_module.StoreReader.scalar

    def counting(self: store_module.StoreReader, query: str, params: Any = None) -> Any:
        asked.append(query)
        return scalar(self, query, params)

    monkeypatch.setattr(store_module.StoreReader, "scalar", counting)
    store = Store()
    try:
        store.append("input_problems", _problems(0, 2))
        reader = store.reader
        assert reader.has_rows("input_problems") and not reader.has_rows("gpu_snapshots")
        assert not reader.has_rows("metric_samples")  # no point stored: the view is empty
        assert asked == []  # the store knew, DuckDB was not asked
        gone = store.reader.sql("SELECT rowid AS row_id FROM input_problems")
        flagged = gone.with_columns(
            pl.lit("input_problems").alias("table_name"), pl.lit("line").alias("column_name")
        )
        store.set_aside(flagged.with_columns(pl.lit(0.0).alias("value")))
        after = store.reader
        assert not after.has_rows("input_problems")  # every row set aside: asked, and empty
        assert len(asked) == 1
        assert after.has_rows("implausible_values")
    finally:
        store.finish()


def test_an_empty_table_is_read_as_its_columns_without_rows() -> None:
    store = Store()
    try:
        reader = store.reader
        empty = reader.empty("metric_samples")
        full = reader.sql("SELECT * FROM metric_samples")
        assert empty.is_empty() and empty.schema == full.schema
    finally:
        store.finish()


LIMIT = "SELECT current_setting('memory_limit') AS limit"


def test_a_query_with_a_large_result_starts_from_the_write_time_limit() -> None:
    store = Store()
    try:
        reader = store.reader
        large = reader.sql(LIMIT, large_result=True)["limit"][0]
        after = reader.scalar(LIMIT)
    finally:
        store.finish()
    assert _mb(large) == pytest.approx(memory_module.APPEND_MEMORY_LIMIT_MB, abs=0.1)
    assert _mb(after) == pytest.approx(memory_module.MEMORY_LIMIT_MB, abs=0.1)


def test_memoised_frames_take_their_size_off_the_limit_down_to_the_write_time_one() -> None:
    # 40 MB held: the read limit less 40; 120 MB more: the floor, not below; a new
    # reader (the memo let go) starts from the whole read limit again.
    store = Store()
    try:
        reader = store.reader
        reader.memo("a", lambda: pl.DataFrame({"x": pl.zeros(5 << 20, pl.Int64, eager=True)}))
        some = _mb(reader.scalar(LIMIT))
        reader.memo("b", lambda: pl.DataFrame({"x": pl.zeros(15 << 20, pl.Int64, eager=True)}))
        most = _mb(reader.scalar(LIMIT))
        reader.memo("c", lambda: {"not a frame": 1})
        fresh = _mb(store.reader.scalar(LIMIT))
    finally:
        store.finish()
    assert some == pytest.approx(memory_module.MEMORY_LIMIT_MB - 40, abs=0.1)
    assert most == pytest.approx(memory_module.APPEND_MEMORY_LIMIT_MB, abs=0.1)
    assert fresh == pytest.approx(memory_module.MEMORY_LIMIT_MB, abs=0.1)


@pytest.fixture
def floored_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store whose write-time limit, the floor reading may start from, is 4 MB."""
    with _store_with_tiny(monkeypatch, "APPEND_MEMORY_LIMIT_MB") as store:
        yield store


def _limits_set(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The limits set on DuckDB from now on, in order."""
    limits: list[int] = []
    setter = store._memory._set
    monkeypatch.setattr(store._memory, "_set", lambda mb: (limits.append(mb), setter(mb)))
    return limits


def test_a_large_result_over_the_write_time_limit_still_comes_back_whole(
    floored_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run out below the read limit, a query gets the read limit (what it would have had
    # without starting low), not four times its start.
    reader = floored_store.reader
    limits = _limits_set(floored_store, monkeypatch)
    frame = reader.sql(WIDE_SORT, large_result=True)
    assert frame.height == 1_000_000 and frame["t"][0] == "x" * 100 + "999999"
    assert limits == [TINY_MB, memory_module.MEMORY_LIMIT_MB]
    assert floored_store._memory.mb == memory_module.MEMORY_LIMIT_MB


def test_a_query_run_out_under_a_budget_gets_the_read_limit_first(
    floored_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = floored_store.reader
    reader.memo("held", lambda: pl.DataFrame({"x": pl.zeros(20 << 20, pl.Int64, eager=True)}))
    assert floored_store._memory.mb == TINY_MB  # 160 MB held: the floor
    limits = _limits_set(floored_store, monkeypatch)
    assert reader.sql(WIDE_SORT).height == 1_000_000
    assert limits == [memory_module.MEMORY_LIMIT_MB, TINY_MB]  # raised, then back to the floor


def test_interrupt_while_creating_the_tables_leaves_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C inside Store() itself: the caller never gets a store to discard."""
    real_ddl = store_module.ddl
    calls = {"n": 0}

    def interrupted(t: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_ddl(t)

    monkeypatch.setattr(store_module, "ddl", interrupted)
    keep = tmp_path / "incident.duckdb"
    with pytest.raises(KeyboardInterrupt):
        Store(keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_released_reader_holds_nothing_it_memoised() -> None:
    store = Store()
    try:
        reader = store.reader
        frame = pl.DataFrame({"x": list(range(100_000))})
        calls: list[int] = []

        def compute() -> pl.DataFrame:
            calls.append(1)
            return frame

        assert reader.memo("points", compute) is frame
        assert reader.memo("points", compute) is frame and len(calls) == 1
        reader.release()
        assert reader.memo("points", compute) is frame and len(calls) == 2  # read again
    finally:
        store.discard()
