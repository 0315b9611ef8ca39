"""kvdiag: forensic analyzer for LLM inference KV-cache incidents."""

from kvdiag._allocator import tune_polars_allocator

tune_polars_allocator()  # before anything imports polars

__version__ = "0.1.0"
