"""KV bytes per token from the model's config.json, and the pool facts it completes.

`kv_bytes_per_token` is computed (kvmath, domain.md §2) for the replica's TP size and KV
dtype whenever a config.json is present: it is exact, where pool bytes / pool tokens is a
quotient of two rounded numbers. The KV dtype is `--kv-cache-dtype`; under "auto" the
model's dtype as the engine resolves it (dtypes.auto_model_dtype). Layer 1 prices a pool
stated in tokens with this same fact. When the incident states the pool's bytes but not its
tokens (launch flags only, no log or metrics), the tokens are computed in whole blocks.
"""

from __future__ import annotations

from typing import Any

from kvdiag.analyzer.model.base import Facts, ref, scoped
from kvdiag.analyzer.model.effective import EngineContext
from kvdiag.analyzer.model.settings import DEFAULT_REPLICA, config_rows, replicas, setting
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain import dtypes, kvmath
from kvdiag.domain.records.diagnosis import Fact, SourceRef
from kvdiag.domain.units import GIB


def value_for(facts: Facts, name: str, replica: str) -> Any:
    """A fact's value for one replica (a single fact applies to all), or None."""
    fact = facts.get(name)
    if isinstance(fact, Fact):
        return fact.value
    for f in fact or ():
        if dict(f.scope).get("replica") == replica:
            return f.value
    return None


def layout_of(row: dict[str, Any]) -> kvmath.KvLayout:
    """The KV layout a model_config row describes."""
    return kvmath.KvLayout(
        full_layers=int(row["full_attention_layers"] or 0),
        kv_heads=int(row["num_kv_heads"] or 0),
        head_dim=int(row["head_dim"] or 0),
        dtype=str(row["dtype"] or ""),
        sliding_layers=int(row["sliding_layers"] or 0),
        sliding_window=row["sliding_window"],
        kv_lora_rank=row["kv_lora_rank"],
        qk_rope_head_dim=row["qk_rope_head_dim"],
    )


def derivation(row: dict[str, Any], tp: int, kv_dtype: str) -> str:
    """How the number was computed, in words and numbers, for the fact's note."""
    layout = layout_of(row)
    text = "computed from config.json: " + (
        _mla_terms(layout, kv_dtype) if layout.is_mla else _attention_terms(layout, tp, kv_dtype)
    )
    if layout.sliding_layers:
        text += (
            f"; {layout.sliding_layers} of the layers use a {layout.sliding_window}-token "
            "sliding window and hold no more than that"
        )
    if row.get("linear_layers"):
        text += f"; {row['linear_layers']} linear/Mamba layers hold no per-token KV"
    return text


def _mla_terms(layout: kvmath.KvLayout, kv_dtype: str) -> str:
    layers = layout.attention_layers
    if dtypes.is_packed(kv_dtype):  # DeepSeek sparse MLA: one fixed-size entry per token
        size = dtypes.mla_latent_bytes(kv_dtype, 0)
        return f"{layers} layers x {size} bytes ({kv_dtype} entry); MLA, the same on every rank"
    return (
        f"({layout.kv_lora_rank} kv_lora_rank + {layout.qk_rope_head_dim} qk_rope_head_dim) "
        f"x {layers} layers x {dtypes.dense_element_bytes(kv_dtype)} bytes ({kv_dtype}); "
        "MLA latent, the same on every rank"
    )


def _attention_terms(layout: kvmath.KvLayout, tp: int, kv_dtype: str) -> str:
    heads = f"{layout.kv_heads}"
    if tp > 1 and layout.kv_heads >= tp:
        heads += f"/{tp} (tp)"
    elif tp > 1:
        heads = f"1 (of {layout.kv_heads}, replicated over tp {tp})"
    if dtypes.is_packed(kv_dtype):
        vector = dtypes.kv_vector_bytes(kv_dtype, layout.head_dim)
        shape = f"{vector} bytes per {layout.head_dim}-value head vector ({kv_dtype}, packed)"
    else:
        size = dtypes.dense_element_bytes(kv_dtype)
        shape = f"{layout.head_dim} head_dim x {size} bytes ({kv_dtype})"
    return f"2 x {layout.attention_layers} layers x {heads} kv_heads x {shape}"


def _model_for(models: list[dict[str, Any]], replica: str) -> dict[str, Any] | None:
    own = [m for m in models if m["replica"] == replica]
    shared = [m for m in models if m["replica"] == DEFAULT_REPLICA]
    found = own or shared
    return found[0] if found else None


def model_kv_facts(reader: StoreReader, facts: Facts) -> None:
    """kv_bytes_per_token per replica, computed from config.json."""
    # A config.json file (given with --model-config, or in the folder) before a copy
    # embedded in a launch record, which names the path it was copied from.
    if not reader.has_rows("model_config"):
        return
    models = reader.sql(
        "SELECT * FROM model_config "
        "ORDER BY replica, model_path IS NOT NULL, source_path, source_line"
    ).to_dicts()
    if not models:
        return
    found = []
    rows = config_rows(reader)
    for replica in replicas(rows, reader):
        row = _model_for(models, replica)
        if row is None:
            continue
        tp = int(value_for(facts, "tensor_parallel_size", replica) or 1)
        try:
            kv_dtype = _kv_dtype(facts, rows, replica, row)
            per_token = kvmath.kv_bytes_per_token(layout_of(row), tp, kv_dtype)
            note = derivation(row, tp, kv_dtype)
        except ValueError:
            continue  # a dtype or split kvdiag cannot size: no number rather than a guess
        if per_token > 0:
            found.append((replica, Fact(per_token, "bytes", ref(row), note)))
    if found:
        facts["kv_bytes_per_token"] = scoped(found)


def _kv_dtype(facts: Facts, rows: list[dict[str, Any]], replica: str, model: dict[str, Any]) -> str:
    """The dtype one replica's KV is stored in; "auto" resolved as the engine resolves it."""
    stated = value_for(facts, "kv_cache_dtype", replica)
    if not dtypes.is_auto(stated):
        return dtypes.resolve_kv_dtype(stated, None)
    engine = setting("dtype", rows, replica, EngineContext())
    engine_dtype = engine.value if engine is not None and not engine.is_default else None
    return dtypes.auto_model_dtype(model["dtype"], engine_dtype)


def pool_completion_facts(reader: StoreReader, facts: Facts) -> None:
    """pool_bytes from VLLM_CPU_KVCACHE_SPACE, pool_tokens from bytes, when not stated."""
    rows = config_rows(reader)
    bytes_found, tokens_found = [], []
    for replica in replicas(rows, reader):
        pool_bytes = value_for(facts, "pool_bytes", replica)
        source = _source(facts, replica)
        if pool_bytes is None:
            space = setting("VLLM_CPU_KVCACHE_SPACE", rows, replica, EngineContext())
            if space is not None and space.row is not None:
                pool_bytes, source = int(float(space.value) * GIB), ref(dict(space.row))
                note = f"VLLM_CPU_KVCACHE_SPACE={space.value} GiB"
                bytes_found.append((replica, Fact(pool_bytes, "bytes", source, note)))
        per_token = value_for(facts, "kv_bytes_per_token", replica)
        block = value_for(facts, "block_size", replica)
        if value_for(facts, "pool_tokens", replica) is None and pool_bytes and per_token and block:
            tokens = kvmath.pool_tokens_from_bytes(int(pool_bytes), int(per_token), int(block))
            note = (
                f"computed: {int(pool_bytes):,} bytes / ({int(per_token):,} bytes per token x "
                f"{int(block)}-token blocks), whole blocks"
            )
            tokens_found.append((replica, Fact(tokens, "tokens", source, note)))
    if bytes_found and "pool_bytes" not in facts:
        facts["pool_bytes"] = scoped(bytes_found)
    if tokens_found and "pool_tokens" not in facts:
        facts["pool_tokens"] = scoped(tokens_found)


def _source(facts: Facts, replica: str) -> SourceRef | None:
    fact = facts.get("pool_bytes")
    if isinstance(fact, Fact):
        return fact.source
    return next((f.source for f in fact or () if dict(f.scope).get("replica") == replica), None)
