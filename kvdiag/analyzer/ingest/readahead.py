"""Inputs read whole are read one ahead, on a worker, while the main thread stores.

A file an ingester reads whole (a Prometheus API export, a Grafana CSV, nvidia-smi output)
is parsed and shaped into frames before any of it is stored, and storing runs on the main
thread (the store's one DuckDB connection). Reading the next such file on a worker while the
main thread inserts the current one's frames puts the second core to work: polars and
DuckDB release the GIL for most of theirs. Streamed inputs (logs, scrape folders) overlap
parsing and storing by themselves, batch by batch, and are read where they are stored so
that their memory stays bounded; at most one whole file is read ahead of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

from kvdiag.analyzer.ingest.base import Emit, IngestContext, InputUnit
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND

_Read = tuple[list[Emit], Exception | None]


class ReadAhead:
    """The emits of each unit in turn; a whole-file unit is read while the one before it
    is stored. Use as a context manager: leaving it abandons a read still queued."""

    def __init__(self, units: Sequence[InputUnit], ctx: IngestContext) -> None:
        self._units = units
        self._ctx = ctx
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvdiag-read-ahead")
        self._ahead: dict[int, Future[_Read]] = {}
        self._stopping = threading.Event()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # None queued starts; one under way stops at its ingester's next emit (a thread
        # cannot be stopped from outside, and the interpreter waits for it before exiting).
        self._stopping.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def emits(self, i: int, ctx: IngestContext) -> Iterator[Emit]:
        """Unit i's emits, as its ingester yields them; an error it raised is raised after
        the emits that came before it, as when it is read here."""
        unit = self._units[i]
        future = self._ahead.pop(i, None)
        self._start(i + 1)
        if future is None:
            yield from INGESTERS_BY_KIND[unit.kind]().ingest(unit, ctx)
            return
        emits, error = future.result()
        yield from emits
        if error is not None:
            raise error

    def _start(self, i: int) -> None:
        if i < len(self._units) and _read_whole(self._units[i]) and i not in self._ahead:
            self._ahead[i] = self._pool.submit(_read, self._units[i], self._ctx, self._stopping)


def _read_whole(unit: InputUnit) -> bool:
    return INGESTERS_BY_KIND[unit.kind].max_bytes is not None


def _read(unit: InputUnit, ctx: IngestContext, stopping: threading.Event) -> _Read:
    emits: list[Emit] = []
    try:
        for emit in INGESTERS_BY_KIND[unit.kind]().ingest(unit, ctx):
            if stopping.is_set():
                break  # nobody will store it
            emits.append(emit)
    except Exception as exc:  # raised on the main thread, where the unit is stored
        return emits, exc
    return emits, None
