"""Binary byte units, once for every layer: a KiB is 1,024 bytes, a MiB 1,024**2, a GiB 1,024**3.

torch, vLLM and SGLang print GiB in this sense even where they write "GB" (domain.md §6's
"18 GB pool" is 16.76 GiB as torch reports it)."""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
