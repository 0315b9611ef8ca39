"""Blocks of whole lines from a text source, cut at line ends, overlong lines cut short.

A line longer than MAX_LINE_BYTES keeps its first MAX_LINE_BYTES bytes and the rest is
skipped as it streams by, so one 1 GB line costs 1 MB (`ReadStats.overlong`); a last
line without a line end is read as it is and remembered (`ReadStats.unterminated`).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kvdiag.analyzer.text.source import (
    MAX_LINE_BYTES,
    ReadStats,
    Source,
    raw_source,
    text_source,
)

_OVERLONG_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole lines of a file: `data` (UTF-8 bytes, each line ending in \\n) from `first_line`."""

    first_line: int
    data: bytes
    lines: int
    # (byte offset, byte length) of the lines in the file, when it is read in place: a
    # line can then be read again from the file instead of being kept (store/by_reference.py).
    span: tuple[int, int] | None = None


def _overlong_start(data: bytes, end: int) -> int:
    """Where a line longer than MAX_LINE_BYTES starts in data[:end], else -1.

    One search per MAX_LINE_BYTES window, not per line: a window holding a line end
    cannot hold the start of an overlong line before that end.
    """
    pos = 0
    while end - pos > MAX_LINE_BYTES:
        nl = data.rfind(b"\n", pos, pos + MAX_LINE_BYTES + 1)
        if nl < 0:
            return pos
        pos = nl + 1
    return -1


# cut(data, end) -> where a batch of data[:end] (whole lines) should end instead: the
# start of a line that begins a record; 0 to end at `end`; -1 to read on first.
CutFn = Callable[[bytes, int], int]


class _Window:
    """The unread part of a text source: `peek` at what is next, `consume` what was used.

    A plain file is read with pread at the position reached, so a partial last line is
    read again with the next block instead of being copied onto it.
    """

    def __init__(self, src: Source | None, fd: int | None, block: int, start: int = 0) -> None:
        self._src, self._fd, self._block = src, fd, block
        self._pos = start
        self._carry = b""
        self._eof = False

    def peek(self, size: int) -> tuple[bytes, bool]:
        """At least `size` unread bytes (fewer only at the end), and whether that is the end."""
        if self._fd is not None:
            data = os.pread(self._fd, size, self._pos)
            return data, len(data) < size
        assert self._src is not None
        parts = [self._carry]
        have = len(self._carry)
        while have < size and not self._eof:
            block = self._src.read(max(self._block, size - have))
            self._eof = not block
            parts.append(block)
            have += len(block)
        self._carry = b"".join(parts) if len(parts) > 1 else self._carry
        return self._carry, self._eof

    @property
    def position(self) -> int | None:
        """Where the unread part starts in the file, when it is read in place."""
        return self._pos if self._fd is not None else None

    def consume(self, n: int) -> None:
        if self._fd is not None:
            self._pos += n
        else:
            self._carry = self._carry[n:]

    def skip_line(self) -> int:
        """Consume the next line, up to and including its line end; its length in bytes."""
        skipped = 0
        while True:
            data, eof = self.peek(self._block)
            nl = data.find(b"\n")
            if nl >= 0:
                self.consume(nl + 1)
                return skipped + nl
            skipped += len(data)
            self.consume(len(data))
            if eof:
                return skipped


class _Chunker:
    """Blocks of whole lines from a text source, with overlong lines cut."""

    def __init__(self, window: _Window, stats: ReadStats, size: int, cut: CutFn | None) -> None:
        self.window, self.stats, self.size, self.cut = window, stats, size, cut

    def chunks(self) -> Iterator[Chunk]:
        want = self.size
        while True:
            data, eof = self.window.peek(want)
            want = self.size
            if not data:
                return
            long_at = _overlong_start(data, len(data))
            if long_at >= 0:
                yield from self._take(data[:long_at], long_at)
                yield self._overlong()
                continue
            end = data.rfind(b"\n") + 1
            if eof and end < len(data):  # the file ends inside its last line
                self.stats.unterminated = self.stats.lines + data.count(b"\n", 0, end) + 1
                yield from self._take(data + b"\n", len(data) + 1)
                return
            stop = end if eof or self.cut is None or end == 0 else self.cut(data, end)
            if stop < 0 and len(data) >= 4 * self.size:  # long lines: stop judging, cut
                stop = end
            if stop <= 0 and (end == 0 or stop < 0):  # no whole line, or too few: read on
                want = 2 * len(data)
                continue
            yield from self._take(data, stop or end)

    def _take(self, data: bytes, stop: int) -> Iterator[Chunk]:
        """Yield the lines of data[:stop] (data may run on) and consume them."""
        if stop == 0:
            return
        lines = data.count(b"\n", 0, stop)
        first = self.stats.lines + 1
        self.stats.lines += lines
        self.stats.bytes += stop
        at = self.window.position
        self.window.consume(min(stop, len(data)))
        yield Chunk(first, data, lines, None if at is None else (at, stop))

    def _overlong(self) -> Chunk:
        """The next line is overlong: keep its head, stream past the rest."""
        head = self.window.peek(MAX_LINE_BYTES)[0][:MAX_LINE_BYTES]
        size = self.window.skip_line()
        self.stats.bytes += size + 1
        line = self.stats.lines + 1
        self.stats.overlong_count += 1
        if len(self.stats.overlong) < _OVERLONG_EXAMPLES:
            self.stats.overlong.append((line, size))
        self.stats.lines += 1
        # Cut at a character boundary: a partial UTF-8 sequence at the end is dropped.
        text = head.decode("utf-8", errors="ignore").encode("utf-8")
        return Chunk(line, text + b"\n", 1)


def iter_chunks(
    path: Path, stats: ReadStats | None, batch_bytes: int, cut: CutFn | None = None
) -> Iterator[Chunk]:
    """Blocks of whole lines (UTF-8 bytes), about `batch_bytes` each, in file order.

    A chunk's `data` may run on past its `lines` lines; take only those. `cut` may move a
    block's end back to a line where a record starts (log readers keep multi-line
    messages in one batch).
    """
    stats = stats if stats is not None else ReadStats()
    with path.open("rb") as fh:
        raw = raw_source(fh, stats)
        src = text_source(raw, stats)
        if raw is fh and stats.encoding == "utf-8":  # plain UTF-8: read in place
            bom = len(codecs.BOM_UTF8) if os.pread(fh.fileno(), 3, 0) == codecs.BOM_UTF8 else 0
            window = _Window(None, fh.fileno(), batch_bytes, bom)
        else:
            window = _Window(src, None, batch_bytes)
        yield from _Chunker(window, stats, batch_bytes, cut).chunks()
