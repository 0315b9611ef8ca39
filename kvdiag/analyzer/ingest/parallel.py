"""Batches parsed on worker threads, handed back in input order.

polars and DuckDB release the GIL, so on a 2-core machine one batch is parsed while the
main thread stores the one before.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def workers() -> int:
    """Threads that parse batches: one per core, at most four (memory grows with each)."""
    return max(1, min(4, os.cpu_count() or 1))


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], threads: int | None = None, ahead: int | None = None
) -> Iterator[R]:
    """fn over items on worker threads, results in input order, a bounded number in flight.

    `ahead` (default: one per thread) bounds the results made before the caller asks for
    them: each is a parsed batch held in memory. Closing the iterator (an interrupt)
    cancels what has not started and waits for the batches being parsed, so no thread
    outlives the reader.
    """
    threads = threads or workers()
    ahead = threads if ahead is None else ahead
    if ahead == 0:
        yield from map(fn, items)
        return
    pool = ThreadPoolExecutor(threads, thread_name_prefix="kvdiag-batch")
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
