"""DuckDB's errors, as what they mean for a run: Ctrl-C stays Ctrl-C, a full disk says so."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from kvdiag.domain.errors import NoSpaceError


@contextmanager
def duckdb_errors() -> Iterator[None]:
    """Ctrl-C inside a query stays Ctrl-C; a full disk is NoSpaceError.

    DuckDB turns SIGINT into `InterruptException`, an ordinary Exception, which a reader
    or a rule would report as its own failure (and the run would go on without it). A
    full disk came back as an IOException that the pipeline blamed on the input being
    read, and each input after it was set aside the same way.
    """
    try:
        yield
    except duckdb.InterruptException as exc:
        raise KeyboardInterrupt from exc
    except duckdb.InvalidInputException as exc:
        # Ctrl-C while DuckDB pulls a registered frame through Arrow reaches it inside that
        # read, and comes back wrapped: "... as Arrow data failed: KeyboardInterrupt".
        if "KeyboardInterrupt" in str(exc):
            raise KeyboardInterrupt from exc
        raise
    except duckdb.Error as exc:
        # An IOException while writing or spilling, a TransactionException when the commit
        # cannot write the write-ahead log: the same full disk.
        if os.strerror(errno.ENOSPC) in str(exc):
            raise NoSpaceError(_no_space(exc)) from exc
        raise


def _no_space(exc: Exception) -> str:
    said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return (
        f"the database's disk is full ({said}). kvdiag keeps its database under TMPDIR "
        f"({tempfile.gettempdir()}), or at --db PATH, with DuckDB's spill files beside it: "
        "up to 3.8 GB for 5 GB of log. Point TMPDIR (or --db) at a disk with room. "
        "Nothing was written."
    )
