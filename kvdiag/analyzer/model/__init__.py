"""Establish the key numbers of the incident from the store, each with its source.

Facts are read, never guessed silently: a derived value says how it was derived, and a
number the folder does not hold is simply absent (and named in missing_evidence).
Per-replica values become a tuple of facts scoped by replica when there are several.
Finders run in order; a later finder may use facts an earlier one established.
"""

from __future__ import annotations

from collections.abc import Callable

from kvdiag.analyzer.model.base import Facts
from kvdiag.analyzer.model.connector import connector_facts
from kvdiag.analyzer.model.engine import device_facts, engine_facts
from kvdiag.analyzer.model.engine_life import prompt_source_facts, sleep_facts
from kvdiag.analyzer.model.gpu import gpu_memory_facts
from kvdiag.analyzer.model.kv import model_kv_facts, pool_completion_facts
from kvdiag.analyzer.model.lmcache import lmcache_facts
from kvdiag.analyzer.model.load import load_facts, preemption_facts
from kvdiag.analyzer.model.offload import offload_facts
from kvdiag.analyzer.model.pool import bytes_per_token_facts, pool_facts
from kvdiag.analyzer.model.residency import residency_facts
from kvdiag.analyzer.model.settings import setting_facts
from kvdiag.analyzer.store.database import StoreReader

FINDERS: tuple[Callable[[StoreReader, Facts], None], ...] = (
    engine_facts,
    device_facts,
    setting_facts,
    gpu_memory_facts,
    model_kv_facts,
    pool_facts,
    pool_completion_facts,
    load_facts,
    preemption_facts,
    bytes_per_token_facts,
    offload_facts,
    lmcache_facts,
    connector_facts,
    residency_facts,
    prompt_source_facts,
    sleep_facts,
)


def establish(reader: StoreReader) -> Facts:
    """All facts the store supports."""
    facts: Facts = {}
    for finder in FINDERS:
        finder(reader, facts)
    return facts


__all__ = ["FINDERS", "Facts", "establish"]
