"""The rule pack: one module per rule, registered here explicitly, sorted by code."""

from __future__ import annotations

from kvdiag.rules.base import Rule
from kvdiag.rules.kv101_unservable_config import UnservableConfig
from kvdiag.rules.kv102_shrunken_pool import ShrunkenPool
from kvdiag.rules.kv103_memory_overcommit import MemoryOvercommit
from kvdiag.rules.kv104_gpu_imbalance import GpuImbalance
from kvdiag.rules.kv105_engine_start_failed import EngineStartFailed
from kvdiag.rules.kv201_padding_waste import PaddingWaste
from kvdiag.rules.kv202_prefill_peak import PrefillPeak
from kvdiag.rules.kv203_offload_no_hits import OffloadNoHits
from kvdiag.rules.kv301_saturation import KvSaturation
from kvdiag.rules.kv302_admission_limited import AdmissionLimited
from kvdiag.rules.kv303_replica_imbalance import ReplicaImbalance
from kvdiag.rules.kv304_headroom import KvHeadroom

RULES: tuple[type[Rule], ...] = (
    UnservableConfig,
    ShrunkenPool,
    MemoryOvercommit,
    GpuImbalance,
    EngineStartFailed,
    PaddingWaste,
    PrefillPeak,
    OffloadNoHits,
    KvSaturation,
    AdmissionLimited,
    ReplicaImbalance,
    KvHeadroom,
)


def get_rule(code_or_name: str) -> type[Rule]:
    """A rule by code (KV301) or name (peak.kv_saturation)."""
    for rule in RULES:
        if code_or_name in (rule.code, rule.name):
            return rule
    raise KeyError(f"no rule {code_or_name!r}; see `kvdiag rules`")
