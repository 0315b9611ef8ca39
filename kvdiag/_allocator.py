"""The allocators tuned for batch after batch: polars' jemalloc, and the C library's malloc.

Polars' jemalloc is told to hand freed memory back sooner, before polars loads.

Polars on Linux allocates through its own jemalloc, which keeps one arena per thread slot
(8 on two cores) and, as polars configures it, holds freed pages for 0.5 s and then
lazily-freed ones for another 1 s before the kernel gets them back. kvdiag
parses batch after batch on worker threads: each batch's pages were kept by the arena that
parsed it, and the process's peak RSS carried them. One arena and pages returned after
200 ms lower the peak at no cost in time; returning them at once costs time. The figures
are in bench/RESULTS.md.

jemalloc reads the variable once, when polars' library is loaded, so this must run before
`import polars`: it runs from `kvdiag/__init__.py`. Polars appends what the variable holds
to its own defaults (later options win). A value the user set is kept.

The C library's malloc (glibc) serves Python's large objects, among them each batch of
scrape files read and joined (32 MB). Above its mmap threshold (dynamic, at most 32 MiB)
every such block was a fresh mapping, its pages faulted in one by one and handed back
when freed. While ingesting (heap_for_batches), the mmap and trim thresholds are 64 MiB,
so the block comes from the heap and the next batch reuses its pages: fewer page faults,
faster reads. Then glibc's initial thresholds come back and the heap's free memory is
handed back, since a block kept for the whole run would raise the peak of a large log,
which comes later, in the rules.

glibc also gives threads arenas of their own, up to 8 per core; each keeps what it freed.
An incident of many inputs (50 replicas: 100 logs and scrape series) starts worker threads
input after input, and their arenas held ~140 MiB more at the peak (536 against 388 MiB,
bench/RESULTS.md). glibc makes no more arenas than there are cores (set at start).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator

# The variable of polars' jemalloc (symbols prefixed `_rjem_`), not the system's MALLOC_CONF.
POLARS_MALLOC_CONF_VAR = "_RJEM_MALLOC_CONF"
POLARS_MALLOC_CONF = "narenas:1,dirty_decay_ms:200,muzzy_decay_ms:0"


def tune_polars_allocator() -> None:
    os.environ.setdefault(POLARS_MALLOC_CONF_VAR, POLARS_MALLOC_CONF)


# glibc's mallopt parameters (malloc.h), and the environment variables that set them: a
# value the user set is kept.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_HEAP_BLOCK_BYTES = 64 << 20
_GLIBC_DEFAULT_BYTES = 128 << 10
_GLIBC_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
_ARENA_VARS = ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")


def _libc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (mallopt and malloc_trim are glibc's)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "malloc_trim"):
        return None
    return libc


def limit_glibc_arenas() -> None:
    """At most one glibc arena per core, set at start: the threads DuckDB and the
    ingesters start make their arenas early, and arenas are never freed."""
    libc = _libc()
    if libc is not None and not any(v in os.environ for v in _ARENA_VARS):
        libc.mallopt(_M_ARENA_MAX, os.cpu_count() or 1)


@contextlib.contextmanager
def heap_for_batches() -> Iterator[None]:
    """Within: big blocks from glibc's heap, kept for reuse. After: glibc's initial
    thresholds (128 KiB) and the heap's free memory handed back.
    """
    libc = _libc()
    if libc is None or any(v in os.environ for v in _GLIBC_VARS):
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, _HEAP_BLOCK_BYTES)
    libc.mallopt(_M_TRIM_THRESHOLD, _HEAP_BLOCK_BYTES)
    try:
        yield
    finally:
        libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_BYTES)
        libc.malloc_trim(0)
