"""kvdiag: forensic analyzer for LLM inference KV-cache incidents."""

from kvdiag._allocator import limit_glibc_arenas, tune_polars_allocator

tune_polars_allocator()  # before anything imports polars
limit_glibc_arenas()  # before any thread starts

__version__ = "0.1.0"
