"""kvdiag: forensic analyzer for LLM inference KV-cache incidents."""

__version__ = "0.1.0"
