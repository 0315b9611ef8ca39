"""KV-cache arithmetic: bytes per token, per request and per pool.

Pure functions, no I/O: every formula of ../shared/docs/domain.md §2 and the arithmetic of its
worked examples (§6), so rules and facts price remedies with one implementation and tests
check it against the documented oracles. Bytes per element of each dtype are in dtypes.py.

Conventions: bytes are integers (one GPU's share unless said otherwise); "tokens" are token
slots of the KV pool; byte units are binary (units.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvdiag.domain import dtypes


@dataclass(frozen=True, slots=True)
class KvLayout:
    """What a model's config.json says about the KV it keeps per token.

    `full_layers` hold KV for every token; `sliding_layers` for at most `sliding_window`
    tokens; linear (Mamba / linear-attention) layers keep a fixed state, no per-token KV,
    so they do not appear here. MLA models (DeepSeek) set `kv_lora_rank` and
    `qk_rope_head_dim`: one latent per token per layer instead of K and V heads.
    """

    full_layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    sliding_layers: int = 0
    sliding_window: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank)

    @property
    def attention_layers(self) -> int:
        return self.full_layers + self.sliding_layers


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads one GPU holds under tensor parallelism `tp`.

    `kv_heads / tp`, at least 1: with fewer KV heads than ranks each head is replicated
    (GQA/MQA under large TP). vLLM refuses sizes that do not divide evenly, and so does this.
    """
    if kv_heads < 1 or tp < 1:
        raise ValueError(f"kv_heads={kv_heads} and tp={tp} must be positive")
    if kv_heads >= tp:
        if kv_heads % tp:
            raise ValueError(f"{kv_heads} KV heads cannot be split evenly over tp={tp}")
        return kv_heads // tp
    if tp % kv_heads:
        raise ValueError(f"tp={tp} is not a multiple of {kv_heads} KV heads (no even replication)")
    return 1


def bytes_per_token_per_layer(layout: KvLayout, tp: int = 1, kv_dtype: str | None = None) -> int:
    """KV bytes one attention layer keeps per token on one GPU.

    Standard attention: 2 (K and V) x kv_heads/tp x head_dim x bytes (packed formats: the
    bytes of their head vectors). MLA: one latent of (kv_lora_rank + qk_rope_head_dim)
    values, no factor 2 and identical on every rank. `kv_dtype` None or "auto": the
    layout's dtype.
    """
    stored = dtypes.resolve_kv_dtype(kv_dtype, layout.dtype)
    if layout.is_mla:
        latent = int(layout.kv_lora_rank or 0) + int(layout.qk_rope_head_dim or 0)
        return dtypes.mla_latent_bytes(stored, latent)
    heads = kv_heads_per_rank(layout.kv_heads, tp)
    return 2 * heads * dtypes.kv_vector_bytes(stored, layout.head_dim)


def kv_bytes_per_token(layout: KvLayout, tp: int = 1, kv_dtype: str | None = None) -> int:
    """KV bytes per token on one GPU while a sequence is within every layer's window.

    Sliding-window layers count here (they do hold the token); beyond the window only the
    full-attention layers grow, see `kv_bytes_for_tokens`.
    """
    return bytes_per_token_per_layer(layout, tp, kv_dtype) * layout.attention_layers


def kv_bytes_for_tokens(
    layout: KvLayout, tokens: int, tp: int = 1, kv_dtype: str | None = None
) -> int:
    """KV bytes one sequence of `tokens` tokens holds on one GPU.

    Full-attention layers hold every token; sliding-window layers at most `sliding_window`.
    """
    per_layer = bytes_per_token_per_layer(layout, tp, kv_dtype)
    windowed = min(tokens, layout.sliding_window) if layout.sliding_window else tokens
    return per_layer * (layout.full_layers * tokens + layout.sliding_layers * windowed)


def demand_bytes(bytes_per_token: int, requests: int, tokens_each: int) -> int:
    """KV bytes `requests` sequences of `tokens_each` tokens need (§6: 32 x 2,048 = 32 GiB)."""
    return bytes_per_token * requests * tokens_each


def peak_request_tokens(prompt_tokens: int, max_tokens: int) -> int:
    """Tokens a request may reach: admission must count prompt + max_tokens, not the now."""
    return prompt_tokens + max_tokens


def blocks_for_tokens(tokens: float, block_size: int) -> int:
    """Blocks a paged pool gives a sequence of `tokens` tokens: whole blocks only."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    return math.ceil(tokens / block_size)


def empty_slots(tokens: int, block_size: int) -> int:
    """Slots allocated to a sequence but not filled (internal fragmentation of its last block)."""
    return blocks_for_tokens(tokens, block_size) * block_size - tokens


def static_batch_payload(lengths: Sequence[int]) -> float:
    """Payload ratio of a static (padded) batch: effective tokens / (batch x longest)."""
    if not lengths:
        raise ValueError("no sequences")
    return sum(lengths) / (len(lengths) * max(lengths))


def paged_payload(lengths: Sequence[int], block_size: int) -> float:
    """Payload ratio of a paged pool: effective tokens / slots of the blocks they occupy."""
    allocated = sum(blocks_for_tokens(n, block_size) * block_size for n in lengths)
    return sum(lengths) / allocated if allocated else 0.0


def usage(used: float, pool: float) -> float:
    """Fraction of the pool in use."""
    if pool <= 0:
        raise ValueError(f"pool must be positive, got {pool}")
    return used / pool


def requests_that_fit(free: float, per_request: float) -> int:
    """Whole requests of size `per_request` that fit in `free` (same unit)."""
    if per_request <= 0:
        raise ValueError(f"per_request must be positive, got {per_request}")
    # A tiny epsilon keeps 5.0 / 2.5 at 2 despite float representation.
    return math.floor(free / per_request + 1e-9)


def pool_tokens_from_bytes(pool_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Token slots a pool of `pool_bytes` holds: whole blocks of `block_size` tokens.

    vLLM's `--kv-cache-memory-bytes 17M` (17,825,792 B) at 2,048 B/token and 128-token
    blocks: 68 blocks = 8,704 tokens.
    """
    block_bytes = bytes_per_token * block_size
    if block_bytes <= 0:
        raise ValueError("bytes_per_token and block_size must be positive")
    return (pool_bytes // block_bytes) * block_size


def pool_bytes_for_tokens(tokens: float, bytes_per_token: float) -> float:
    """Bytes `tokens` token slots of KV take (a pool stated in tokens, or a demand)."""
    return tokens * bytes_per_token


def bytes_per_token_from_pool(pool_bytes: int, pool_tokens: int) -> int:
    """Bytes per token an engine's pool implies: its bytes over its token slots, rounded down.

    A quotient of two printed numbers (often rounded to 0.01 GiB): the config.json
    arithmetic above is exact and preferred where a config is at hand.
    """
    if pool_tokens <= 0:
        raise ValueError(f"pool_tokens must be positive, got {pool_tokens}")
    return pool_bytes // pool_tokens


def cards_for(total_bytes: float, card_bytes: float) -> int:
    """Cards of `card_bytes` needed to hold `total_bytes` (KV alone)."""
    return math.ceil(total_bytes / card_bytes - 1e-9)
