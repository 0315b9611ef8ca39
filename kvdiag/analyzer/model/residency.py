"""How long KV blocks stay in vLLM's GPU pool, from the `--kv-cache-metrics` histograms.

vLLM 0.12+ samples blocks (`--kv-cache-metrics-sample`) and records three histograms
(vllm/v1/core/kv_cache_metrics.py): a block's lifetime from allocation to eviction, how
long it sat idle before it was evicted, and the gap between two uses of a block. Their
means over the window (increase of `_sum` / increase of `_count`) say whether prefixes are
evicted before they are asked for again: a reuse gap longer than the idle time before
eviction is a prefix the pool drops before its next use, the case a second KV tier
(CPU offload, LMCache) exists for. Facts only when the histograms were scraped.
"""

from __future__ import annotations

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.model.samples import SqlReader, samples
from kvdiag.domain.counters import counter_increase
from kvdiag.domain.records.diagnosis import Fact

_HISTOGRAMS = (
    ("kv_block_lifetime", "kv_block_lifetime_mean_s", "allocation to eviction"),
    ("kv_block_idle_before_evict", "kv_block_idle_before_evict_mean_s", "idle before eviction"),
    ("kv_block_reuse_gap", "kv_block_reuse_gap_mean_s", "between two uses of a block"),
)


def residency_facts(reader: SqlReader, facts: Facts) -> None:
    """kv_block_lifetime_mean_s, kv_block_idle_before_evict_mean_s, kv_block_reuse_gap_mean_s."""
    for metric, name, what in _HISTOGRAMS:
        total, count = samples(reader, metric, "sum"), samples(reader, metric, "count")
        if total.is_empty() or count.is_empty():
            continue
        blocks = counter_increase(count)
        if blocks <= 0:
            continue
        mean = counter_increase(total) / blocks
        last = count.row(count.height - 1, named=True)
        note = f"mean {what} over {blocks:,.0f} sampled blocks (increase of _sum / _count)"
        facts[name] = Fact(round(mean, 3), "seconds", ref(last), note)
