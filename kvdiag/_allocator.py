"""Polars' memory allocator told to hand freed memory back sooner, before polars loads.

Polars on Linux allocates through its own jemalloc, which keeps one arena per thread slot
(8 on two cores) and, as polars configures it, holds freed pages for 0.5 s and then
lazily-freed ones for another 1 s before the kernel gets them back. kvdiag
parses batch after batch on worker threads: each batch's pages were kept by the arena that
parsed it, and the process's peak RSS carried them (1 GB of log: 517 MiB). One arena and
pages returned after 200 ms: 464 MiB, and no slower (alternating runs, 1 GB of log and a day
of scrapes; returning them at once cost 25 % more time). See README "Performance".

jemalloc reads the variable once, when polars' library is loaded, so this must run before
`import polars`: it runs from `kvdiag/__init__.py`. Polars appends what the variable holds
to its own defaults (later options win). A value the user set is kept.
"""

from __future__ import annotations

import os

# The variable of polars' jemalloc (symbols prefixed `_rjem_`), not the system's MALLOC_CONF.
POLARS_MALLOC_CONF_VAR = "_RJEM_MALLOC_CONF"
POLARS_MALLOC_CONF = "narenas:1,dirty_decay_ms:200,muzzy_decay_ms:0"


def tune_polars_allocator() -> None:
    os.environ.setdefault(POLARS_MALLOC_CONF_VAR, POLARS_MALLOC_CONF)
