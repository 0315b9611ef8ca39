"""Page-cache hints: tell the kernel which files will be read next (POSIX_FADV_WILLNEED).

The kernel reads ahead within a file, never from one file to the next, so thousands of
small files read one after another each wait for the disk when they are not in the
page cache (a folder copied days ago, a network mount). Announced a little ahead, the
reads overlap, and an uncached folder reads about as fast as a cached one. Where
posix_fadvise does not exist (macOS, Windows) nothing is announced and nothing else changes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

CAN_ADVISE = hasattr(os, "posix_fadvise")


def announce(path: str | Path, length: int = 0) -> int:
    """Announce the first `length` bytes of a file (0: all of it); return its size.

    An unreadable file is not announced: its size is what stat says, or 0 (the reader
    reports it).
    """
    if not CAN_ADVISE:
        return _size(path)
    try:
        # Non-blocking: a FIFO put where a file was must not stop the run on its open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return _size(path)
    try:
        with contextlib.suppress(OSError):  # not every kind of file takes advice
            os.posix_fadvise(fd, 0, length, os.POSIX_FADV_WILLNEED)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _size(path: str | Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class HeadPrefetch:
    """For a walk that reads the first bytes of many files, in order.

    Announcing costs an open per file, nearly what a cached head's read costs, so it
    starts only once reads turn out slow: every `window` files the walk's pace is checked
    until two windows in a row took over `slow_us` a file; then the files a window ahead
    are announced to the end of the walk. `slow_us` lies well above a cached walk's pace
    and well below an uncached peek's (bench/RESULTS.md has both).
    """

    def __init__(
        self, paths: Sequence[str | None], length: int, window: int = 256, slow_us: float = 50.0
    ) -> None:
        """`paths`: the walk's files in order; None for one not to announce (not a regular
        file: opening a FIFO or a device is not harmless)."""
        self._paths = paths
        self._length = length
        self._window = window
        self._slow_s = slow_us / 1e6
        self._checked_at = time.perf_counter()
        self._cold = False
        self._slow_before = False  # the last window checked was slow
        self._announced_to = 0  # files before this index have been announced

    def before(self, k: int) -> None:
        """Call before reading file `k`."""
        if k == 0 or k % self._window:
            return
        if not self._cold:
            now = time.perf_counter()
            # Not the first window: it holds one-time costs (the first file sniffed loads
            # every format). And two slow windows in a row, not one: a garbage collection
            # pass can make one window of a cached walk slow.
            slow = k > self._window and (now - self._checked_at) / self._window > self._slow_s
            self._cold = slow and self._slow_before
            self._slow_before = slow
            self._checked_at = now
        if self._cold:
            end = min(k + 2 * self._window, len(self._paths))
            for path in self._paths[max(k, self._announced_to) : end]:
                if path is not None:
                    announce(path, self._length)
            self._announced_to = max(self._announced_to, end)

    @property
    def cold(self) -> bool:
        """Whether reads were found slow and files are being announced."""
        return self._cold
