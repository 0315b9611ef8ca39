"""Pool facts: pool tokens and max_model_len from the log's pool line, bytes per token.

The pool is per replica and, when a folder holds two engines, per engine (their pools side
by side). SGLang's pool is max_total_num_tokens per TP rank, from its start-up lines or, when
no log was kept, from its /metrics gauge. The configuration facts (blocks, bytes, block size,
dtype ...) are in settings.py.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdiag.analyzer.model.base import Facts, first_per_replica, ref, scoped, scoped_by
from kvdiag.analyzer.model.engine import ENGINE_OF_INPUT
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain import kvmath
from kvdiag.domain.records.diagnosis import Fact
from kvdiag.domain.units import GIB

# Per replica and engine (that printed them): the first pool line stating `col` in `order`,
# and the most lines one pool message has (`_repeats`). A message printed more than once was
# printed per rank (SGLang also states its pool twice), or at every start of a crash loop,
# whose pool lines are not read one by one: the first is found in SQL.
_POOL_LINES = (
    "WITH p AS (SELECT p.rowid AS _rid, p.replica, p.event, p.tokens, p.gib, p.max_model_len, "
    f"p.source_path, p.source_line, coalesce(i.e, '') AS _engine FROM log_kv_pool p LEFT JOIN "
    f"(SELECT path, {ENGINE_OF_INPUT} AS e FROM inputs) i ON i.path = p.source_path "
    "WHERE p.{col} IS NOT NULL{also}), "
    "r AS (SELECT replica, _engine, max(n) AS _repeats FROM "
    "(SELECT replica, _engine, event, count(*) AS n FROM p GROUP BY ALL) GROUP BY ALL), "
    "f AS (SELECT _rid, _engine FROM p QUALIFY row_number() OVER "
    "(PARTITION BY replica, _engine ORDER BY {order}, p.source_path, p.source_line, _rid) = 1) "
    "SELECT k.*, f._engine, r._repeats FROM log_kv_pool k JOIN f ON k.rowid = f._rid "
    "JOIN r ON k.replica IS NOT DISTINCT FROM r.replica AND f._engine = r._engine "
    "ORDER BY k.replica, f._engine"
)


def _pool_lines(reader: StoreReader, col: str, order: str, also: str = "") -> pl.DataFrame:
    if not reader.has_rows("log_kv_pool"):
        return pl.DataFrame()  # no pool line read: no query
    return reader.sql(_POOL_LINES.format(col=col, order=order, also=also))


def _per_scope(rows: pl.DataFrame) -> list[tuple[dict[str, str], dict[str, Any], int]]:
    """(scope, first row, most lines one pool message has) per replica and engine."""
    return [
        ({"replica": str(r["replica"]), "engine": str(r["_engine"])}, r, int(r["_repeats"]))
        for r in rows.iter_rows(named=True)
    ]


def _keep(facts: Facts) -> tuple[str, ...]:
    """Scope keys to keep: the engine, when the folder holds more than one."""
    return ("engine",) if isinstance(facts.get("engine"), tuple) else ()


def pool_facts(reader: StoreReader, facts: Facts) -> None:
    """Pool size in tokens: the log's pool line (minimum over ranks), else the metrics."""
    found = []
    for scope, row, repeats in _per_scope(_pool_lines(reader, "tokens", "p.tokens")):
        note = "smallest of the ranks' pool lines" if repeats > 1 else None
        found.append((scope, Fact(int(row["tokens"]), "tokens", ref(row), note)))
    if found:
        facts["pool_tokens"] = scoped_by(found, _keep(facts))
    else:
        per_replica = _tokens_from_metrics(reader) or _tokens_from_blocks(facts)
        if per_replica:
            facts["pool_tokens"] = scoped(per_replica)
    mml = _per_scope(_pool_lines(reader, "max_model_len", "p.source_path"))
    if mml:
        facts["max_model_len"] = scoped_by(
            [(scope, Fact(int(r["max_model_len"]), "tokens", ref(r))) for scope, r, _ in mml],
            _keep(facts),
        )


def _tokens_from_metrics(reader: StoreReader) -> list[tuple[str, Fact]]:
    """vLLM 0.33's cache_config_info kv_cache_size_tokens, else SGLang's pool gauge."""
    cfg = (
        first_per_replica(
            reader.sql(
                "SELECT * FROM config WHERE key = 'kv_cache_size_tokens' "
                "AND value NOT IN ('None', '') ORDER BY replica, source_path, source_line"
            )
        )
        if reader.has_rows("config")
        else []
    )
    if cfg:
        return [(r["replica"], Fact(int(r["value"]), "tokens", ref(r))) for r in cfg]
    if not reader.has_rows("metric_samples"):
        return []
    gauge = first_per_replica(
        reader.sql(
            "SELECT * FROM metric_samples WHERE metric = 'kv_pool_tokens' AND suffix = '' "
            "ORDER BY replica, value, source_path, source_line"
        )
    )
    note = "SGLang's max_total_num_tokens gauge (smallest rank)"
    return [(r["replica"], Fact(int(r["value"]), "tokens", ref(r), note)) for r in gauge]


def _tokens_from_blocks(facts: Facts) -> list[tuple[str, Fact]]:
    """Before 0.33 cache_config_info has no kv_cache_size_tokens: blocks x block size."""
    blocks, size = facts.get("pool_blocks"), facts.get("block_size")
    if not (isinstance(blocks, Fact) and isinstance(size, Fact)):
        return []
    if not isinstance(blocks.value, int) or not isinstance(size.value, int):
        return []
    note = "num_gpu_blocks x block_size"
    return [("", Fact(blocks.value * size.value, "tokens", blocks.source, note))]


def bytes_per_token_facts(reader: StoreReader, facts: Facts) -> None:
    """KV bytes per token from the pool's bytes and tokens, when config.json gave none."""
    if "kv_bytes_per_token" in facts:
        return  # computed from the model's config: exact, where this quotient is rounded
    pool_bytes, tokens = facts.get("pool_bytes"), facts.get("pool_tokens")
    if isinstance(pool_bytes, Fact) and isinstance(tokens, Fact) and tokens.value:
        per_token = kvmath.bytes_per_token_from_pool(
            int(pool_bytes.value),  # type: ignore[arg-type]
            int(tokens.value),
        )
        facts["kv_bytes_per_token"] = Fact(
            per_token, "bytes", pool_bytes.source, "pool bytes / pool tokens"
        )
        return
    # SGLang's pool line states both halves of the quotient on one line.
    lines = _per_scope(_pool_lines(reader, "gib", "p.tokens IS NULL, p.gib", " AND p.tokens > 0"))
    if lines:
        facts["kv_bytes_per_token"] = scoped_by(
            [
                (scope, Fact(_line_bytes_per_token(r), "bytes", ref(r), _NOTE))
                for scope, r, _ in lines
            ],
            _keep(facts),
        )


def _line_bytes_per_token(row: dict[str, Any]) -> int:
    return kvmath.bytes_per_token_from_pool(int(row["gib"] * GIB), int(row["tokens"]))


_NOTE = "pool GiB / pool tokens of one pool line (GiB printed to 0.01)"
