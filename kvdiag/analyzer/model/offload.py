"""vLLM's second KV tier: what the offload connector stored, what it served back, its size.

The OffloadingConnector (vLLM 0.19.1+; vllm/distributed/kv_transfer/kv_connector/v1/
offloading/metrics.py) counts the bytes it moves: `vllm:kv_offload_total_bytes` by
`transfer_type` GPU_to_CPU (stores) and CPU_to_GPU (loads) up to 0.22.1, and from 0.33.0
also the flat `vllm:kv_offload_store_bytes` / `vllm:kv_offload_load_bytes` (the flat ones
win when both are scraped: the deprecated pair repeats them). A load is a hit the tier
served back to the GPU. Every KV connector (offloading, LMCache, NIXL ...) also counts the
prompt tokens it was asked for and found, `vllm:external_prefix_cache_queries` / `_hits`
(0.11.2+), which give the tier's hit rate in tokens. 0.33's `vllm:kv_offload_config_info`
states the CPU tier's size (`cpu_kv_cache_size_bytes`, `cpu_kv_cache_size_tokens`).

Facts are made only when an offload family was scraped or the external cache was queried:
a server without a connector exports the external counters at zero, which says nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import polars as pl

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.model.samples import SqlReader, samples
from kvdiag.domain.counters import counter_increase
from kvdiag.domain.records.diagnosis import Fact

_STORE = "GPU_to_CPU"
_LOAD = "CPU_to_GPU"


@dataclass(frozen=True, slots=True)
class Counted:
    """A counter's increase over the window and its last sample (for evidence)."""

    value: float
    row: dict[str, Any]
    note: str


@dataclass(frozen=True, slots=True)
class OffloadTier:
    """What the store holds about the offload tier and the external prefix cache."""

    stored_bytes: Counted | None
    loaded_bytes: Counted | None
    external_queries: Counted | None
    external_hits: Counted | None
    tier_bytes: tuple[int, dict[str, Any]] | None
    tier_tokens: tuple[int, dict[str, Any]] | None

    @property
    def external_hit_rate(self) -> float | None:
        if self.external_queries is None or not self.external_queries.value:
            return None
        hits = self.external_hits.value if self.external_hits is not None else 0.0
        return hits / self.external_queries.value

    @property
    def present(self) -> bool:
        queried = self.external_queries is not None and self.external_queries.value > 0
        return self.stored_bytes is not None or self.loaded_bytes is not None or queried


def counted_increase(frame: pl.DataFrame, what: str) -> Counted | None:
    if frame.is_empty():
        return None
    last = frame.row(frame.height - 1, named=True)
    return Counted(counter_increase(frame), last, f"increase of {last['name']}{what}")


def _of_type(frame: pl.DataFrame, transfer_type: str) -> pl.DataFrame:
    if frame.is_empty():
        return frame
    pattern = rf'"transfer_type":\s*"{transfer_type}"'
    return frame.filter(pl.col("labels").str.contains(pattern))


def _info_label(frame: pl.DataFrame, key: str) -> tuple[int, dict[str, Any]] | None:
    for row in frame.iter_rows(named=True):
        try:
            value = json.loads(row["labels"] or "{}").get(key)
        except ValueError:
            continue
        if value not in (None, "", "None"):
            try:
                return int(float(value)), row
            except ValueError:
                continue
    return None


def offload_tier(reader: SqlReader) -> OffloadTier:
    """The offload tier over the whole window (every replica and engine added up)."""
    flat_store = samples(reader, "kv_offload_store_bytes", "total")
    flat_load = samples(reader, "kv_offload_load_bytes", "total")
    legacy = samples(reader, "kv_offload_transfer_bytes", "total")
    legacy_note = " {transfer_type=%s}"
    stored = counted_increase(flat_store, "") or counted_increase(
        _of_type(legacy, _STORE), legacy_note % _STORE
    )
    loaded = counted_increase(flat_load, "") or counted_increase(
        _of_type(legacy, _LOAD), legacy_note % _LOAD
    )
    if stored is not None and loaded is None and (flat_store.height or legacy.height):
        # The connector registers both directions at start-up; a direction never scraped
        # under a scraped family moved nothing.
        loaded = Counted(0.0, stored.row, "no load samples beside the store samples")
    info = samples(reader, "kv_offload_config_info")
    return OffloadTier(
        stored,
        loaded,
        counted_increase(samples(reader, "external_prefix_cache_queries", "total"), ""),
        counted_increase(samples(reader, "external_prefix_cache_hits", "total"), ""),
        _info_label(info, "cpu_kv_cache_size_bytes"),
        _info_label(info, "cpu_kv_cache_size_tokens"),
    )


def offload_facts(reader: SqlReader, facts: Facts) -> None:
    """offload_stored_bytes, offload_loaded_bytes, external_prefix_queries/_hits/_hit_rate,
    offload_tier_bytes/_tokens: only when a KV connector was at work."""
    tier = offload_tier(reader)
    if not tier.present:
        return
    for name, counted, unit in (
        ("offload_stored_bytes", tier.stored_bytes, "bytes"),
        ("offload_loaded_bytes", tier.loaded_bytes, "bytes"),
        ("external_prefix_queries", tier.external_queries, "tokens"),
        ("external_prefix_hits", tier.external_hits, "tokens"),
    ):
        if counted is not None:
            facts[name] = Fact(int(counted.value), unit, ref(counted.row), counted.note)
    rate = tier.external_hit_rate
    if rate is not None and tier.external_queries is not None:
        facts["external_prefix_hit_rate"] = Fact(
            round(rate, 4),
            "ratio",
            ref(tier.external_queries.row),
            "external_prefix_cache_hits / external_prefix_cache_queries over the window",
        )
    for name, found, unit in (
        ("offload_tier_bytes", tier.tier_bytes, "bytes"),
        ("offload_tier_tokens", tier.tier_tokens, "tokens"),
    ):
        if found is not None:
            label = "cpu_kv_cache_size_bytes" if unit == "bytes" else "cpu_kv_cache_size_tokens"
            facts[name] = Fact(found[0], unit, ref(found[1]), f"kv_offload_config_info {label}")
