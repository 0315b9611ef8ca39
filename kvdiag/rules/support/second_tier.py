"""Layer 1 sees the second KV tier: the CPU memory a KV connector holds beside the GPU pool.

vLLM's offloading connector states its CPU tier in `vllm:kv_offload_config_info`
(`cpu_kv_cache_size_tokens`, 0.33); LMCache states its local CPU cache at start-up
(`max_local_cpu_size`, GB, allocated by every TP rank: LMCache/LMCache#2901) and what it
holds in `lmcache:local_cache_usage` (bytes). The comparisons put each beside the GPU pool
in the pool's own unit; they decide nothing (the tier is no part of the GPU pool's usage).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvdiag.analyzer.model.offload import offload_tier
from kvdiag.analyzer.model.samples import samples
from kvdiag.domain.records.diagnosis import Comparison
from kvdiag.rules.base import RuleContext

_GIB = 1024**3

_LMCACHE_CONFIG = (
    "SELECT * FROM log_kv_connector WHERE connector = 'lmcache' AND event = 'config' "
    "AND gib IS NOT NULL ORDER BY source_path, source_line LIMIT 1"
)
_GPU_KV_MEMORY = (
    "SELECT * FROM log_kv_pool WHERE event = 'available_kv_memory' AND gib IS NOT NULL "
    "ORDER BY source_path, source_line LIMIT 1"
)


def second_tier(ctx: RuleContext) -> Iterator[Comparison]:
    """The CPU tier of vLLM's offloading connector and LMCache's CPU cache, where stated."""
    yield from _offload_tier(ctx)
    yield from _lmcache(ctx)


def _offload_tier(ctx: RuleContext) -> Iterator[Comparison]:
    tier = ctx.memo("offload_tier", lambda: offload_tier(ctx))
    if tier.tier_tokens is None:
        return
    tokens, row = tier.tier_tokens
    gpu = ctx.fact("pool_tokens")
    yield ctx.compare(
        "CPU offload tier vs the GPU pool",
        gpu.value if gpu is not None and isinstance(gpu.value, int | float) else None,
        tokens,
        "tokens",
        [gpu, ctx.evidence(row, "cpu_kv_cache_size_tokens", tokens)],
        "expected: the GPU pool; the second tier holds what the GPU pool evicts",
    )


def _lmcache(ctx: RuleContext) -> Iterator[Comparison]:
    config = ctx.sql(_LMCACHE_CONFIG)
    if config.is_empty():
        return
    row: dict[str, Any] = config.row(0, named=True)
    size = float(row["gib"])
    gpu = ctx.sql(_GPU_KV_MEMORY)
    gpu_row = gpu.row(0, named=True) if gpu.height else None
    yield ctx.compare(
        "LMCache local CPU cache vs the GPU KV memory (per GPU)",
        float(gpu_row["gib"]) if gpu_row is not None else None,
        size,
        "GiB",
        [
            ctx.evidence(gpu_row, "Available KV cache memory", gpu_row["gib"]) if gpu_row else None,
            ctx.evidence(row, "max_local_cpu_size", size),
        ],
        "expected: the GPU's KV memory; every TP rank allocates max_local_cpu_size of host "
        "memory for its shard of the KV (LMCache counts GB as GiB)",
    )
    held = samples(ctx, "lmcache_local_cache_usage")
    if held.is_empty():
        return
    peak = held.row(int(held["value"].arg_max() or 0), named=True)
    yield ctx.compare(
        "LMCache local CPU cache held at its peak",
        size,
        round(float(peak["value"]) / _GIB, 2),
        "GiB",
        [ctx.evidence(row, "max_local_cpu_size", size), ctx.evidence(peak, "held", peak["value"])],
        "lmcache:local_cache_usage at its highest sample vs the configured size",
    )
