"""The DuckDB store: the only module that writes the database.

Ingesters hand frames to `Store.append`; rules read through `StoreReader`, which has no
write path. With `--db PATH` the database is built at `PATH.partial` and renamed into place
only when the analysis completes, so an interrupted run leaves no half-written file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import polars as pl

from kvdiag.analyzer.schema import TABLES, Table, table
from kvdiag.analyzer.schema.metrics import SERIES_HEAD, SERIES_HINT
from kvdiag.analyzer.schema.sample_tail import TAIL
from kvdiag.analyzer.store.arrow_stream import FrameStream, to_polars
from kvdiag.analyzer.store.by_reference import BLOCKS_QUERY, Blocks
from kvdiag.analyzer.store.errors import duckdb_errors
from kvdiag.analyzer.store.memory import (
    MEMORY_LIMIT_MB,
    MemoryLimit,
    floor_mb,
)
from kvdiag.analyzer.store.series_tables import POINTS, SAMPLES, SERIES, SeriesCatalog

T = TypeVar("T")

_HINTS = (SERIES_HINT, SERIES_HEAD)  # what an ingester may add to a batch, not stored
_CUT = (TAIL,)  # metric_samples: `raw` already cut after the series' head (sample_tail.py)

# DuckDB folds its write-ahead log into the database file every 16 MiB by default, which
# rewrote the growing tables over and over: most of the time it took to store a large log.
# The store is written once and read after; one checkpoint at the end (or none, for the
# scratch store) is enough.
CHECKPOINT_THRESHOLD = "4GB"
# Appends are gathered per table and inserted together: an INSERT from a registered frame
# costs DuckDB milliseconds of set-up whatever its size, and storing the ~6,000 stats rows
# of each 8 MB log batch one INSERT at a time kept the main thread busy more than twice as
# long as gathered. Past either bound, one INSERT; more rows waiting would gain little and
# hold more memory.
FLUSH_ROWS = 25_000
FLUSH_BYTES = 16 << 20


def ddl(t: Table) -> str:
    """CREATE TABLE (or VIEW) statement for a declared table."""
    if t.view is not None:
        return f'CREATE VIEW IF NOT EXISTS "{t.name}" AS {t.view}'
    cols = ",\n  ".join(f'"{c.name}" {c.type}' for c in t.columns)
    return f'CREATE TABLE IF NOT EXISTS "{t.name}" (\n  {cols}\n)'


INT32_LIMIT = 2**31 - 1


def _fit(frame: pl.DataFrame, t: Table) -> pl.DataFrame:
    """Integers wider than an INTEGER column saturate at the 32-bit limit instead of failing
    the insert; the plausibility check (validate.py) then reports them with their line."""
    narrow = [
        pl.col(c.name).clip(-INT32_LIMIT, INT32_LIMIT).cast(pl.Int32)
        for c in t.columns
        if c.type == "INTEGER"
        and c.name in frame.columns
        and frame.schema[c.name].is_integer()
        and frame.schema[c.name] != pl.Int32
    ]
    return frame.with_columns(narrow) if narrow else frame


def _detached(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with its strings copied out of the buffers they share.

    A string sliced from a parsed batch keeps that batch's whole text alive (polars string
    views): stats rows waiting for their insert would hold their batches' log text.
    """
    text = [c for c, dtype in frame.schema.items() if dtype == pl.String]
    return frame.with_columns(pl.concat_str(pl.col(c), pl.lit("")).alias(c) for c in text)


class StoreReader:
    """Read-only access to the store: what rules and fact-finders get."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        memory: MemoryLimit,
        known: Mapping[str, bool] | None = None,
    ) -> None:
        self._con = con
        self._memory = memory
        self._memo: dict[Hashable, Any] = {}
        self._held = 0  # bytes of the memoised frames, given up by DuckDB's limit
        self._known = dict(known or {})  # table -> has rows, where the store knows

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, run once per reader and key, its result shared afterwards.

        A reader is handed out once the store is complete, so what it read stays true.
        Rules that judge each replica of a fleet ask for the same whole-fleet frames again
        and again; reading them once keeps the cost linear in the replicas. Callers must
        not change what they get (polars frames are immutable; dicts and lists are not).
        """
        if key not in self._memo:
            self._memo[key] = computed = compute()
            if isinstance(computed, pl.DataFrame):
                self._held += int(computed.estimated_size())
                self._memory.give_way(self._held >> 20)
        value: T = self._memo[key]
        return value

    def sql(
        self, query: str, params: Sequence[Any] | None = None, *, large_result: bool = False
    ) -> pl.DataFrame:
        """Run a read query and return a polars frame.

        `large_result`: the result is big enough (a row per stats line of a day) to start
        the query from the write-time limit; DuckDB's share gives way to it.
        """
        # A cursor keeps rule queries independent of each other's result state.
        cur = self._con.cursor()
        try:
            frame: pl.DataFrame = self._memory.run(
                lambda: to_polars(cur.sql(query, params=list(params or []))),
                floor_mb() if large_result else None,
            )
            return frame
        finally:
            cur.close()

    def release(self) -> None:
        """Let go of what was memoised, now and not when the last reference goes: the
        rules' reader sits in reference cycles (contexts in memoised values), so its frames
        (a fleet's load points) lived on into the charts' reads until a cyclic collection."""
        self._memo.clear()
        self._held = 0
        self._memory.give_way(0)

    def line_text(self, source_path: str, line: int) -> str | None:
        """The text of a line stored by reference (raw NULL), read again from its file:
        None when the file's lines were not recorded (store/by_reference.py)."""
        if not self.has_rows("line_blocks"):
            return None
        blocks = self.memo(("line_blocks", source_path), lambda: self._blocks(source_path))
        if blocks is None:
            return None
        return self.memo(("line_text", source_path, line), lambda: blocks.line(line))

    def _blocks(self, source_path: str) -> Blocks | None:
        rows = self.sql(BLOCKS_QUERY, [source_path])
        if rows.is_empty():
            return None
        first, lines, offset, length = (tuple(rows[c].to_list()) for c in rows.columns[1:])
        return Blocks(str(rows["file_path"][0]), first, lines, offset, length)

    def scalar(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """Run a query returning one value (or None when there is no row)."""
        cur = self._con.cursor()
        try:
            rows = self._memory.run(lambda: cur.sql(query, params=list(params or [])).fetchall())
        finally:
            cur.close()
        return rows[0][0] if rows else None

    def count(self, table_name: str) -> int:
        """Rows in a declared table."""
        table(table_name)  # reject unknown names before they reach SQL
        return int(self.scalar(f'SELECT count(*) FROM "{table_name}"') or 0)

    def empty(self, table_name: str) -> pl.DataFrame:
        """A declared table's (or view's) columns with no row, as `SELECT *` types them:
        what a query of a table known empty returns, read once."""
        table(table_name)
        return self.memo(
            ("empty", table_name), lambda: self.sql(f'SELECT * FROM "{table_name}" LIMIT 0')
        )

    def has_rows(self, table_name: str) -> bool:
        """Whether a declared table holds any row.

        Rules ask this before they run, each of the tables it needs: counting metric_samples
        (a view joining its series to tens of millions of points for a day of scrapes) was
        a large share of the rules' time; the first row answers, and the answer is read once.
        The store that wrote the tables knows the answer without asking DuckDB
        (Store.known_rows): a query costs 2-6 ms even on an empty table, and a pasted
        fragment fills two or three of the store's tables, so facts, checks and charts
        skip what is known empty.
        """
        table(table_name)
        if table_name in self._known:
            return self._known[table_name]
        return bool(
            self.memo(
                ("has_rows", table_name),
                lambda: self.scalar(f'SELECT EXISTS (SELECT 1 FROM "{table_name}")'),
            )
        )


class Store:
    """The incident database. Create, append frames, hand out a reader, finish or discard."""

    def __init__(self, keep_at: Path | None = None, in_memory: bool = False) -> None:
        """A store kept at `keep_at` (a database file, written there when finished), or a
        scratch one: a file in a temporary folder, or for a small input (`in_memory`) held
        in memory, which spares a small analysis the file's write-ahead log at each insert
        (~50 ms on the bundled example). A large input needs the file: DuckDB writes its
        tables out there under the memory limit."""
        self._final = keep_at
        if keep_at is not None:
            self._path = keep_at.with_name(keep_at.name + ".partial")
            self._path.unlink(missing_ok=True)
            self._tmpdir = None
        else:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="kvdiag-")
            self._path = Path(self._tmpdir.name) / "incident.duckdb"
        in_memory = in_memory and keep_at is None
        self._con = duckdb.connect(":memory:" if in_memory else str(self._path))
        if in_memory:  # where sorts and joins spill, instead of `.tmp` in the working folder
            self._con.execute(f"SET temp_directory = '{self._path}.tmp'")
        try:
            self._create()
        except BaseException:  # Ctrl-C while creating: the caller has no store to discard
            self.discard()
            raise

    def _create(self) -> None:
        # DuckDB's default (80 % of RAM) lets its cache grow with the input; past this it
        # writes to the database file, so a 5 GB incident fits in the same memory as 1 GB.
        self._memory = MemoryLimit(self._con, floor_mb())
        self._con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        self._series = SeriesCatalog()
        self._pending: dict[str, list[pl.DataFrame]] = {}
        self._filled: set[str] = set()  # tables an INSERT went into
        self._thinned: set[str] = set()  # tables rows were deleted from (set_aside)
        for t in TABLES:
            self._con.execute(ddl(t))

    @property
    def reader(self) -> StoreReader:
        """A reader of everything appended so far."""
        self.flush()
        self._memory.start_from(MEMORY_LIMIT_MB)
        return StoreReader(self._con, self._memory, self.known_rows())

    def known_rows(self) -> dict[str, bool]:
        """Whether each table holds rows, where the inserts tell: a table no row went into
        is empty, one rows went into and none were set aside from holds some. The view
        metric_samples has rows when both its parts have (an inner join of them: a series
        stored without its points is possible, so then DuckDB is asked)."""
        known = {t.name: t.name in self._filled for t in TABLES if t.view is None}
        for name in self._thinned:
            del known[name]
        parts = [t.name for t in TABLES if t.part_of == SAMPLES]
        if not all(known.get(p, True) for p in parts):
            known[SAMPLES] = False
        return known

    def append(
        self, table_name: str, frame: pl.DataFrame, series: pl.DataFrame | None = None
    ) -> None:
        """Append a frame; its columns must be declared, missing ones become NULL.

        metric_samples may come as points and `series`: a row per SERIES_HINT of the frame
        with what names that series (TableBatch.series), instead of those columns per row.
        """
        if frame.is_empty():
            return
        declared = table(table_name)
        given = frame.columns + ([] if series is None else series.columns)
        allowed = declared.column_names + _HINTS + (_CUT if table_name == SAMPLES else ())
        unknown = [c for c in given if c not in allowed]
        if unknown:
            raise ValueError(f"{table_name}: undeclared columns {unknown}")
        if declared.part_of is not None:
            raise ValueError(f"{table_name} is written by appending to {declared.part_of}")
        if series is not None and table_name != SAMPLES:
            raise ValueError(f"{table_name}: only {SAMPLES} rows come with their series apart")
        if table_name == SAMPLES:
            split = self._series.split(frame, series)
            self._insert(SERIES, split.new_series)
            self._insert(POINTS, split.points)
            self._series.accept(split)
        else:
            self._insert(table_name, frame.drop(_HINTS, strict=False))

    def _insert(self, table_name: str, frame: pl.DataFrame) -> None:
        if frame.is_empty():
            return
        pending = self._pending.setdefault(table_name, [])
        pending.append(frame)
        rows = sum(f.height for f in pending)
        size = sum(int(f.estimated_size()) for f in pending)
        if rows >= FLUSH_ROWS or size >= FLUSH_BYTES:
            self._flush_table(table_name)
        else:
            pending[-1] = _detached(frame)

    def flush(self) -> None:
        """Insert what is gathered: before reading, and after each input, so that a failed
        insert is reported against the input that made the rows."""
        for table_name in list(self._pending):
            self._flush_table(table_name)

    def _flush_table(self, table_name: str) -> None:
        frames = self._pending.pop(table_name)
        # Batches of one table may lack different optional columns, or hold only nulls
        # in one: each column takes the type that holds every batch's values.
        frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
        del frames
        cols = ", ".join(f'"{c}"' for c in frame.columns)
        insert = f'INSERT INTO "{table_name}" ({cols}) SELECT {cols} FROM _kvdiag_batch'
        fitted = _fit(frame, table(table_name))
        # A failed statement is rolled back whole: running it again adds no row twice.
        self._memory.run(lambda: self._with_frame("_kvdiag_batch", fitted, insert))
        self._filled.add(table_name)

    def _with_frame(self, name: str, frame: pl.DataFrame, statement: str) -> None:
        """Run `statement` with `frame` readable as `name`, registered for this attempt only:
        DuckDB before 1.5 reads a registered stream once, and a retry reads it again."""
        # Unregistering after a Ctrl-C inside the Arrow read can raise that read's error
        # again, in place of the KeyboardInterrupt: it is converted back here too.
        with duckdb_errors():
            self._con.register(name, FrameStream(frame))
            try:
                self._con.execute(statement)
            finally:
                self._con.unregister(name)

    def set_aside(self, flagged: pl.DataFrame) -> None:
        """Move implausible rows out of their tables into `implausible_values`.

        `flagged` has one row per (row, column) found implausible: table_name, row_id (the
        DuckDB rowid), column_name, value, low, high and the row's provenance.
        """
        if flagged.is_empty():
            return
        self.flush()
        self.append("implausible_values", flagged.drop("row_id"))
        for (name,), rows in flagged.group_by("table_name"):
            table(str(name))  # reject unknown names before they reach SQL
            # A metric sample's row id is its rowid in metric_points (see series_tables.py).
            target = POINTS if name == SAMPLES else name
            self._thinned.add(target)
            delete = f'DELETE FROM "{target}" WHERE rowid IN (SELECT row_id FROM _kvdiag_rows)'
            self._with_frame("_kvdiag_rows", rows.select("row_id").unique(), delete)

    def finish(self) -> Path | None:
        """Close; with --db, move the finished database into place and return its path.
        A failure (a full disk at the last checkpoint) leaves no database behind."""
        try:
            with duckdb_errors():
                self.flush()
                if self._final is None:
                    # A scratch store is deleted next: folding its write-ahead log into the
                    # file on close would be wasted work.
                    self._con.execute("PRAGMA disable_checkpoint_on_shutdown")
                else:
                    # Folded in here, where a failure raises: on close, DuckDB kept quiet
                    # about a full disk and left the log beside a file without the tables.
                    self._con.execute("CHECKPOINT")
                self._con.close()
        except BaseException:
            self.discard()
            raise
        if self._final is None:
            if self._tmpdir is not None:
                self._tmpdir.cleanup()
            return None
        os.replace(self._path, self._final)
        return self._final

    def discard(self) -> None:
        """Close and delete everything (interrupted or failed run)."""
        try:
            self._con.close()
        finally:
            if self._tmpdir is not None:
                self._tmpdir.cleanup()
            else:
                self._path.unlink(missing_ok=True)
                Path(str(self._path) + ".wal").unlink(missing_ok=True)
