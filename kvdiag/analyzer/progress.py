"""How far an analysis has got, for whoever is watching: the pipeline reports, a view draws.

Every phase that can take long on a big incident reports here: discovery (a day of
one-second scrapes is 86,400 files to open and sniff, seconds on a cold page cache),
reading each input (bytes and lines, batch by batch), and the phases after ingestion
(facts and rules, charts, the database), which take seconds of their own on gigabytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvdiag.analyzer.ingest.base import InputUnit

# Phases after ingestion, in the order the pipeline reaches them.
CHECKING = "checking the evidence and running the rules"
CHARTING = "charting the series"
SAVING = "writing the database"


class Progress(Protocol):
    """What the pipeline tells as it goes. Calls come from the main thread only."""

    def found(self, files: int, size: int) -> None:
        """Discovery has looked at `files` files of `size` bytes so far."""

    def reading(self, i: int, n: int, unit: InputUnit, done: int, lines: int) -> None:
        """Input `i` of `n` has had `done` of its bytes and `lines` lines read."""

    def phase(self, name: str) -> None:
        """A phase after ingestion has begun (one of the constants above)."""


class TerminalProgress:
    """One line of stderr, redrawn in place (`\\r`, erase to end of line).

    Discovery reports every file; the line is redrawn at most every `interval` seconds so
    that 86,400 files do not become 86,400 writes. The first report of each input and
    every phase are drawn at once.
    """

    def __init__(
        self,
        write: Callable[[str], None],
        clock: Callable[[], float] = time.perf_counter,
        interval: float = 0.1,
    ) -> None:
        self._write = write
        self._clock = clock
        self._interval = interval
        self._drawn_at: float | None = None
        self._started: dict[int, float] = {}
        self._discovery_started: float | None = None

    def found(self, files: int, size: int) -> None:
        now = self._clock()
        if self._discovery_started is None:
            self._discovery_started = now
        start = self._discovery_started
        if self._due(now):
            rate = _rate(files, now - start, "files")
            self._draw(now, f"finding inputs: {files:,} files, {_mb(size)} MB{rate}")

    def reading(self, i: int, n: int, unit: InputUnit, done: int, lines: int) -> None:
        now = self._clock()
        first = i not in self._started
        start = self._started.setdefault(i, now)
        if first or self._due(now):
            rate = _rate(lines, now - start, "lines")
            files = f" ({len(unit.files):,} files)" if len(unit.files) > 1 else ""
            self._draw(
                now,
                f"[{i + 1}/{n}] reading {unit.rel}{files}: {_mb(done)} of "
                f"{_mb(unit.size_bytes)} MB, {lines:,} lines{rate}",
            )

    def phase(self, name: str) -> None:
        self._draw(self._clock(), f"{name} ...")

    def clear(self) -> None:
        """Erase the line, before the report or an error is printed."""
        self._write("\r\x1b[K")

    def _due(self, now: float) -> bool:
        return self._drawn_at is None or now - self._drawn_at >= self._interval

    def _draw(self, now: float, text: str) -> None:
        self._drawn_at = now
        self._write(f"\r\x1b[K{text}")


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f}"


def _rate(count: int, seconds: float, what: str) -> str:
    """`, N what/s`; nothing at the start, where a rate would be a division by ~0."""
    return f", {count / seconds:,.0f} {what}/s" if seconds > 0 else ""
