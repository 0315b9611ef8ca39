"""A database an earlier `analyze --db PATH` kept, opened read-only for another look
(`kvdiag compare` accepts one for either side). It writes nothing."""

from __future__ import annotations

from pathlib import Path

import duckdb

from kvdiag.analyzer.schema import TABLES
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.analyzer.store.memory import MEMORY_LIMIT_MB, MemoryLimit, floor_mb
from kvdiag.domain.errors import NoInputError


class KeptStore:
    """A database an earlier `analyze --db PATH` kept, opened read-only for another look.

    Raises NoInputError when the file is not a DuckDB database holding kvdiag's tables.
    """

    def __init__(self, path: Path) -> None:
        try:
            self._con = duckdb.connect(str(path), read_only=True)
        except duckdb.Error as exc:
            raise NoInputError(f"not a DuckDB database kvdiag can open: {exc}", path=path) from None
        found = {
            r[0] for r in self._con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        }
        found |= {
            r[0] for r in self._con.execute("SELECT view_name FROM duckdb_views()").fetchall()
        }
        lacking = [t.name for t in TABLES if t.name not in found]
        if lacking:
            self._con.close()
            raise NoInputError(
                f"not a database `kvdiag analyze --db` kept (no table {', '.join(lacking[:3])}"
                + (", ..." if len(lacking) > 3 else "")
                + "); it may come from another kvdiag version",
                path=path,
            )
        self._memory = MemoryLimit(self._con, floor_mb())
        self._memory.start_from(MEMORY_LIMIT_MB)

    @property
    def reader(self) -> StoreReader:
        return StoreReader(self._con, self._memory)

    def close(self) -> None:
        self._con.close()


Connection = duckdb.DuckDBPyConnection  # what kvdiag.connect returns


def open_read_only(path: Path) -> Connection:
    """A kept database's read-only connection, for the caller to keep and close (the Python
    API's `kvdiag.connect`); refused (NoInputError) as KeptStore refuses what
    `analyze --db` did not keep."""
    return KeptStore(path)._con
