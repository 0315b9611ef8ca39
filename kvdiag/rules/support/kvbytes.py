"""KV bytes per token from a model's shape (domain.md §2).

A minimal local helper so layer 1 can turn a pool in tokens into bytes when the log does
not print the pool's memory. The GPU/model helper is writing the full version in
kvdiag/domain/kvmath.py (sliding windows, hybrid layers); the lead unifies the two.
"""

from __future__ import annotations

import math

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
}


def dtype_bytes(dtype: str | None, default: int = 2) -> int:
    """Bytes per element of a KV dtype name ('auto' and unknown names: the default)."""
    if not dtype:
        return default
    name = dtype.lower().removeprefix("torch.")
    return _DTYPE_BYTES.get(name, default)


def bytes_per_token(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    element_bytes: int = 2,
    tp: int = 1,
) -> int:
    """K and V of every layer for one token, on one GPU of a tensor-parallel group.

    Each GPU holds kv_heads / tp heads, at least one (heads are replicated when
    kv_heads < tp).
    """
    heads_here = max(1, math.ceil(num_kv_heads / max(tp, 1)))
    return 2 * num_layers * heads_here * head_dim * element_bytes


def mla_bytes_per_token(
    num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int, element_bytes: int = 2
) -> int:
    """Latent attention (DeepSeek MLA): one latent per token per layer, no factor 2."""
    return (kv_lora_rank + qk_rope_head_dim) * num_layers * element_bytes
