"""Pool facts: pool tokens and max_model_len from the log's pool line, bytes per token.

The configuration facts (blocks, bytes, block size, dtype ...) are in settings.py.
"""

from __future__ import annotations

import polars as pl

from kvdiag.analyzer.facts.base import Facts, first_per_replica, ref, scoped
from kvdiag.analyzer.model import Fact
from kvdiag.analyzer.store import StoreReader


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
    """KV bytes per token from the pool's bytes and tokens, when config.json gave none."""
    if "kv_bytes_per_token" in facts:
        return  # computed from the model's config: exact, where this quotient is rounded
    pool_bytes, tokens = facts.get("pool_bytes"), facts.get("pool_tokens")
    if isinstance(pool_bytes, Fact) and isinstance(tokens, Fact) and tokens.value:
        per_token = int(pool_bytes.value) // int(tokens.value)  # type: ignore[arg-type]
        facts["kv_bytes_per_token"] = Fact(
            per_token, "bytes", pool_bytes.source, "pool bytes / pool tokens"
        )
