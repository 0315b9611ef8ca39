"""Pool and configuration facts: pool tokens, blocks, bytes, block size, max_model_len."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from kvdiag.analyzer.facts.base import Facts, first_per_replica, ref, scoped
from kvdiag.analyzer.model import Fact
from kvdiag.analyzer.store import StoreReader

_CONFIG_FACTS: tuple[tuple[str, str, str, Callable[[str], Any]], ...] = (
    # fact name, config key, unit, converter
    ("pool_blocks", "num_gpu_blocks", "blocks", int),
    ("block_size", "block_size", "tokens", int),
    ("pool_bytes", "kv_cache_memory_bytes", "bytes", int),
    ("gpu_memory_utilization", "gpu_memory_utilization", "fraction", float),
    ("kv_cache_dtype", "cache_dtype", "", str),
    ("enable_prefix_caching", "enable_prefix_caching", "", lambda v: v == "True"),
    ("max_concurrency", "kv_cache_max_concurrency", "requests", float),
)


def config_facts(reader: StoreReader, facts: Facts) -> None:
    for name, key, unit, convert in _CONFIG_FACTS:
        rows = first_per_replica(
            reader.sql(
                "SELECT * FROM config WHERE key = ? AND value NOT IN ('None', '') "
                "ORDER BY replica, source_path, source_line",
                [key],
            )
        )
        if rows:
            facts[name] = scoped(
                [(r["replica"], Fact(convert(r["value"]), unit, ref(r))) for r in rows]
            )


def pool_facts(reader: StoreReader, facts: Facts) -> None:
    """Pool size in tokens: the log's pool line (minimum over ranks), else cache_config_info."""
    rows = reader.sql(
        "SELECT * FROM log_kv_pool WHERE tokens IS NOT NULL "
        "ORDER BY replica, tokens, source_path, source_line"
    )
    per_replica = []
    for r in first_per_replica(rows):
        note = (
            "smallest of the ranks' pool lines"
            if rows.filter(pl.col("replica") == r["replica"]).height > 1
            else None
        )
        per_replica.append((r["replica"], Fact(int(r["tokens"]), "tokens", ref(r), note)))
    if not per_replica:
        cfg = first_per_replica(
            reader.sql(
                "SELECT * FROM config WHERE key = 'kv_cache_size_tokens' "
                "AND value NOT IN ('None', '') "
                "ORDER BY replica, source_path, source_line"
            )
        )
        per_replica = [(r["replica"], Fact(int(r["value"]), "tokens", ref(r))) for r in cfg]
    if not per_replica:
        per_replica = _tokens_from_blocks(facts)
    if per_replica:
        facts["pool_tokens"] = scoped(per_replica)
    mml = first_per_replica(
        reader.sql(
            "SELECT * FROM log_kv_pool WHERE max_model_len IS NOT NULL "
            "ORDER BY replica, source_path, source_line"
        )
    )
    if mml:
        facts["max_model_len"] = scoped(
            [(r["replica"], Fact(int(r["max_model_len"]), "tokens", ref(r))) for r in mml]
        )


def _tokens_from_blocks(facts: Facts) -> list[tuple[str, Fact]]:
    """Before 0.33 cache_config_info has no kv_cache_size_tokens: blocks x block size."""
    blocks, size = facts.get("pool_blocks"), facts.get("block_size")
    if not (isinstance(blocks, Fact) and isinstance(size, Fact)):
        return []
    if not isinstance(blocks.value, int) or not isinstance(size.value, int):
        return []
    note = "num_gpu_blocks x block_size"
    return [("", Fact(blocks.value * size.value, "tokens", blocks.source, note))]


def bytes_per_token(reader: StoreReader, facts: Facts) -> None:
    """KV bytes per token from the pool's bytes and tokens, when both are known."""
    pool_bytes, tokens = facts.get("pool_bytes"), facts.get("pool_tokens")
    if isinstance(pool_bytes, Fact) and isinstance(tokens, Fact) and tokens.value:
        per_token = int(pool_bytes.value) // int(tokens.value)  # type: ignore[arg-type]
        facts["kv_bytes_per_token"] = Fact(
            per_token, "bytes", pool_bytes.source, "pool bytes / pool tokens"
        )
