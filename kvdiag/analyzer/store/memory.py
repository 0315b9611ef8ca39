"""DuckDB's memory limit for one store: low while writing, raised for a query that needs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import duckdb

from kvdiag.analyzer.store.errors import duckdb_errors

T = TypeVar("T")

MEMORY_LIMIT_MB = 128
# While the store is being written nothing is read: DuckDB's cache only holds the appended
# blocks it has not yet written out. A lower limit there lowers the peak of a long scrape
# series at no cost in time; queries start from MEMORY_LIMIT_MB once a reader is handed
# out.
APPEND_MEMORY_LIMIT_MB = 64
# A query whose working set or result outgrows the limit fails with OutOfMemoryException
# (a fleet's day of counter samples sorted with their provenance needs more). It is run
# again with four times the limit (first with the stage's limit, if it started below it),
# up to the ceiling; the limit goes back down after it.
MEMORY_CEILING_MB = 8192


class MemoryLimit:
    """DuckDB's memory limit for one store: low, raised for the one query that needs more.

    `stage_mb` is the limit of the stage (writing, reading); queries start from `mb`, which
    is lower while readers hold large frames (`give_way`). A query that runs out below the
    stage's limit gets that limit first, so a budget never makes a query hold more than it
    would have without one; past it, four times as much each time.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, mb: int) -> None:
        self._con = con
        self.mb = self.stage_mb = mb
        self.peak_mb = self.mb  # the highest limit a query needed
        self._set(self.mb)

    def start_from(self, mb: int) -> None:
        """Make `mb` the stage's limit, the one each query starts from."""
        self.stage_mb = mb
        self._start(mb)

    def give_way(self, held_mb: int) -> None:
        """Queries start `held_mb` lower (frames readers hold), down to the floor."""
        self._start(max(min(self.stage_mb, floor_mb()), self.stage_mb - held_mb))

    def _start(self, mb: int) -> None:
        if mb != self.mb:
            self.mb = mb
            self.peak_mb = max(self.peak_mb, mb)
            self._set(mb)

    def _set(self, mb: int) -> None:
        self._con.execute(f"SET memory_limit = '{mb}MB'")

    def run(self, query: Callable[[], T], start_mb: int | None = None) -> T:
        """`query()`, run again with a raised limit each time DuckDB runs out of memory.

        `start_mb` (at most the current limit) starts this query lower: one whose result is
        large. The limit goes back down afterwards: DuckDB keeps its cache up to the limit,
        and one big sort must not make the rest of the run hold hundreds of MB more.
        """
        mb = min(self.mb, start_mb or self.mb)
        if mb != self.mb:
            self._set(mb)
        try:
            while True:
                try:
                    with duckdb_errors():
                        return query()
                except duckdb.OutOfMemoryException:
                    if mb >= MEMORY_CEILING_MB:
                        raise
                    mb = self.stage_mb if mb < self.stage_mb else min(mb * 4, MEMORY_CEILING_MB)
                    self.peak_mb = max(self.peak_mb, mb)
                    self._set(mb)
        finally:
            if mb != self.mb:
                self._set(self.mb)


# What the rules hold and what DuckDB caches add up. Frames a reader memoises (a large
# log's load points, a row per stats line) take their size off the limit queries start
# from, down to the write-time limit, and a query whose result is that large starts there
# too: otherwise DuckDB's sort space and the result it hands over are both alive at a large
# log's peak. See MemoryLimit.give_way and StoreReader.sql.
def floor_mb() -> int:
    """The lowest limit reading starts from: the write-time one."""
    return min(APPEND_MEMORY_LIMIT_MB, MEMORY_LIMIT_MB)
