"""Configuration facts: each setting's effective value, its source, or the version's default.

Rows come from the `config` table (metrics, launch records) and from the engine's own
config line (`log_engine`, origin "log"). Settings stated at the folder level (replica
"default": a launch.txt or config.json beside the replica folders) apply to every replica
that states nothing itself. A default is a fact with no source line and a note naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import polars as pl

from kvdiag.analyzer.model.base import Facts, ref, scoped
from kvdiag.analyzer.model.effective import Effective, EngineContext, effective_value
from kvdiag.analyzer.model.engine import engine_of_replica
from kvdiag.analyzer.model.first_stated import (
    first_config_rows,
    first_engine_rows,
    first_gauge_rows,
)
from kvdiag.analyzer.model.reads import Reads
from kvdiag.domain.records.diagnosis import Fact
from kvdiag.domain.settings import setting_metrics

DEFAULT_REPLICA = "default"

SETTING_FACTS: tuple[tuple[str, str, str, Callable[[str], Any]], ...] = (
    # fact name, canonical config key, unit, converter
    ("pool_blocks", "num_gpu_blocks", "blocks", int),
    ("block_size", "block_size", "tokens", int),
    ("pool_bytes", "kv_cache_memory_bytes", "bytes", int),
    ("gpu_memory_utilization", "gpu_memory_utilization", "fraction", float),
    ("kv_cache_dtype", "kv_cache_dtype", "", str),
    ("enable_prefix_caching", "enable_prefix_caching", "", lambda v: v == "True"),
    ("max_concurrency", "kv_cache_max_concurrency", "requests", float),
    ("max_model_len", "max_model_len", "tokens", int),
    ("max_num_seqs", "max_num_seqs", "requests", int),
    ("max_num_batched_tokens", "max_num_batched_tokens", "tokens", int),
    ("tensor_parallel_size", "tensor_parallel_size", "GPUs", int),
    ("pipeline_parallel_size", "pipeline_parallel_size", "GPUs", int),
    ("data_parallel_size", "data_parallel_size", "replicas", int),
)

# log_engine column -> canonical config key (the engine's "Initializing ... with config:" line)
_LOG_ENGINE_KEYS = {
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "kv_cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "enable_prefix_caching",
    "max_seq_len": "max_model_len",
    "version": "engine_version",
    "device": "device",
    "dtype": "dtype",
}
_WORKER_TP = re.compile(r"Worker_TP(\d+)")


class ConfigRows(list[dict[str, Any]]):
    """Config rows that also know each replica's own rows (grouped once, when first asked).

    A fleet asks for every setting of every replica; filtering all rows each time would
    cost replicas x rows per question. Not to be changed once built.
    """

    _by_replica: dict[Any, list[dict[str, Any]]] | None = None

    def of(self, replica: str) -> list[dict[str, Any]]:
        if self._by_replica is None:
            self._by_replica = {}
            for r in self:
                self._by_replica.setdefault(r.get("replica"), []).append(r)
        return self._by_replica.get(replica, [])


def config_rows(reader: Reads) -> ConfigRows:
    """Config rows, the engine config line's values and the setting gauges (SGLang's) as rows."""
    return reader.memo("facts.config_rows", lambda: _config_rows(reader))


def _config_rows(reader: Reads) -> ConfigRows:
    # The first statement of each kind only (first_stated.py): the values and lines the
    # facts pick are the same, and a crash loop's restated configuration is not read.
    # Each source is read only when it holds rows (known from the store without a query).
    rows = ConfigRows()
    if reader.has_rows("config"):
        rows += reader.sql(first_config_rows()).to_dicts()
    stating = setting_metrics()  # a gauge's row is keyed by its engine's name for the setting
    scraped = reader.has_rows("metric_samples")
    gauges = reader.sql(first_gauge_rows(stating)).to_dicts() if scraped else []
    for r in gauges:
        own = stating[r["metric"]]
        rows.append(
            {**r, "key": own.name, "value": r["_v"], "origin": "metrics", "engine": own.engine}
        )
    if not reader.has_rows("log_engine"):
        return rows
    engine_rows = reader.sql(first_engine_rows(_LOG_ENGINE_KEYS))
    for r in engine_rows.to_dicts():
        for column, key in _LOG_ENGINE_KEYS.items():
            if r.get(column) is not None:
                rows.append({**r, "key": key, "value": str(r[column]), "origin": "log"})
    return rows


def replicas(rows: list[dict[str, Any]], reader: Reads) -> list[str]:
    """Replicas that state settings or ran a log; "default" when none is named."""
    named = {str(r["replica"]) for r in rows if r.get("replica")}
    if reader.has_rows("log_kv_pool"):
        pools = reader.sql("SELECT DISTINCT replica FROM log_kv_pool")
        named |= set(pools["replica"].to_list())
    named.discard(DEFAULT_REPLICA)
    return sorted(named) or [DEFAULT_REPLICA]


def for_replica(rows: list[dict[str, Any]], replica: str) -> list[dict[str, Any]]:
    """The rows a replica states itself."""
    if isinstance(rows, ConfigRows):
        return rows.of(replica)
    return [r for r in rows if r.get("replica") == replica]


def setting(
    key: str, rows: list[dict[str, Any]], replica: str, ctx: EngineContext
) -> Effective | None:
    """`key` for one replica: its own statement, else the folder's, else the default."""
    own = effective_value(key, for_replica(rows, replica), ctx)
    if own is not None and not own.is_default:
        return own
    shared = effective_value(key, for_replica(rows, DEFAULT_REPLICA), ctx)
    return shared if shared is not None and not shared.is_default else own or shared


def engine_context(
    reader: Reads, rows: list[dict[str, Any]], replica: str, facts: Facts
) -> EngineContext:
    """Engine, version, device, GPU memory and TP: what defaults depend on."""
    bare = EngineContext()

    def stated(key: str) -> str | None:
        found = setting(key, rows, replica, bare)
        return found.value if found is not None and not found.is_default else None

    own = (str(r["engine"]) for r in for_replica(rows, replica) if r.get("engine"))
    engine = next(own, None) or engine_of_replica(reader, facts, replica)
    if engine is None and isinstance(facts.get("engine"), tuple):
        engine = ""  # two engines and no telling which: no engine's defaults apply
    elif engine is None:
        engine = next((str(r["engine"]) for r in rows if r.get("engine")), "vllm")
    gpu = _gpu(reader, replica)
    pool_device = reader.memo(
        "facts.pool_device",
        lambda: (
            reader.scalar("SELECT lower(min(device)) FROM log_kv_pool WHERE device IS NOT NULL")
            if reader.has_rows("log_kv_pool")
            else None
        ),
    )
    device = stated("device") or {"gpu": "cuda", "cpu": "cpu"}.get(pool_device or "")
    if device is None and gpu["mib"] is not None:
        device = "cuda"
    tp = stated("tensor_parallel_size")
    return EngineContext(
        engine=engine,
        version=stated("engine_version"),
        device=device,
        gpu_total_gib=gpu["mib"] / 1024 if gpu["mib"] is not None else None,
        gpu_name=gpu["name"],
        tp=int(tp) if tp and tp.isdigit() else None,
    )


def _gpu(reader: Reads, replica: str) -> dict[str, Any]:
    """The replica's largest card and its name (every card's for the default replica)."""
    if not reader.has_rows("gpu_snapshots"):
        return {"mib": None, "name": None}
    per = reader.memo(
        "facts.gpu_by_replica",
        lambda: reader.sql(
            "SELECT replica, max(memory_total_mib) AS mib, min(name) AS name "
            "FROM gpu_snapshots GROUP BY ALL"
        ),
    )
    rows = per if replica == DEFAULT_REPLICA else per.filter(pl.col("replica") == replica)
    return {"mib": rows["mib"].max(), "name": rows["name"].min()}


def _fact(found: Effective, unit: str, convert: Callable[[str], Any]) -> Fact:
    if found.row is None:
        note = f"{found.source}: {found.note}" if found.note else found.source
        return Fact(convert(found.value), unit or None, None, note)
    return Fact(convert(found.value), unit or None, ref(dict(found.row)), found.note)


def setting_facts(reader: Reads, facts: Facts) -> None:
    """Every setting of SETTING_FACTS with its best source, per replica."""
    rows = config_rows(reader)
    per_key: dict[str, list[tuple[str, Fact]]] = {}
    for replica in replicas(rows, reader):
        ctx = engine_context(reader, rows, replica, facts)
        for name, key, unit, convert in SETTING_FACTS:
            found = setting(key, rows, replica, ctx)
            if name == "tensor_parallel_size" and (found is None or found.is_default):
                found = _tp_from_processes(reader, replica) or found
            if found is None:
                continue
            try:
                per_key.setdefault(name, []).append((replica, _fact(found, unit, convert)))
            except ValueError:
                continue  # a value as written that does not convert ("auto" max_model_len)
    for name, scoped_facts in per_key.items():
        facts[name] = scoped(scoped_facts)


def _tp_from_processes(reader: Reads, replica: str) -> Effective | None:
    """TP size from nvidia-smi's process names (VLLM::Worker_TP0 ... Worker_TP7)."""
    if not reader.has_rows("gpu_processes"):
        return None
    every = reader.memo(
        "facts.tp_processes",
        lambda: reader.sql(
            "SELECT * FROM gpu_processes WHERE process_name LIKE '%Worker_TP%' "
            "ORDER BY source_path, source_line"
        ).to_dicts(),
    )
    procs = [p for p in every if replica == DEFAULT_REPLICA or p["replica"] == replica]
    ranks = {int(m.group(1)) for p in procs if (m := _WORKER_TP.search(p["process_name"]))}
    if not ranks:
        return None
    row = {**procs[0], "origin": "nvidia-smi"}
    note = f"from nvidia-smi process names VLLM::Worker_TP0..TP{max(ranks)}"
    return Effective("tensor_parallel_size", str(max(ranks) + 1), "nvidia-smi", row, note)
