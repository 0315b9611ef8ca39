"""kvdiag: forensic analyzer for LLM inference KV-cache incidents."""

import os

__version__ = "0.1.0"

# polars allocates through jemalloc, which keeps freed pages for 10 s before it gives them
# back: batch after batch of parsed frames held ~80 MiB more than the run ever used at
# once (1 GB of log: 493 -> 410 MiB peak, for ~8 % more ingest time). jemalloc reads this
# when polars first allocates, so it is set before polars is imported; a program that
# imported polars first, or set its own, keeps its allocator as it was.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
