"""The memory ledger of one GPU: its terms, what each audience calls them, and the balance.

    card total = weights + KV pool + activation peak + CUDA graphs + non-torch
                 + other processes + free                                    (domain.md §1)
    budget     = card total x gpu_memory_utilization                        (domain.md §3.1)

The engine spends its budget on weights, activation peak, non-torch memory and (vLLM 0.20 and
later) CUDA graphs; the KV pool is what they leave. Whatever the stated terms do not cover is
"not attributed": a co-tenant, a card that was not empty at start, a term no input printed.

This is the one table of terms: the findings' waterfall (rules) and the report's stacked bars
(reports) both name a term by its key here, read it from the fact named here, and print the
label here for their audience.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerTerm:
    """One term of the ledger."""

    key: str  # the one spelling every layer uses
    fact: str | None  # the diagnosis fact carrying its bytes; None for the remainder
    bar_label: str  # short: the report's stacked bar, its legend and per-GPU lines
    finding_label: str  # long: the findings' waterfall and remedies, which say what it holds


WEIGHTS = LedgerTerm("weights", "weights_bytes", "weights", "model weights")
KV_POOL = LedgerTerm("kv_pool", "pool_bytes", "KV pool", "KV pool")
ACTIVATION = LedgerTerm(
    "activation", "activation_bytes", "activation peak", "activation peak (profiling)"
)
CUDA_GRAPH = LedgerTerm("cuda_graph", "cuda_graph_bytes", "CUDA graphs", "CUDA graphs")
NON_TORCH = LedgerTerm(
    "non_torch",
    "non_torch_bytes",
    "non-torch (NCCL, context)",
    "non-torch memory (NCCL, CUDA context)",
)
OTHER_PROCESSES = LedgerTerm(
    "other_processes", "other_processes_bytes", "other processes", "other processes"
)
FREE = LedgerTerm("free", "gpu_free_bytes", "free", "free")
UNATTRIBUTED = LedgerTerm(
    "unattributed",
    None,
    "not attributed",
    "not attributed (co-tenant, card not empty at start, unprinted terms)",
)

# Everything on the card, in the stacked bar's order (UNATTRIBUTED is what they leave).
CARD_TERMS: tuple[LedgerTerm, ...] = (
    WEIGHTS,
    KV_POOL,
    ACTIVATION,
    CUDA_GRAPH,
    NON_TORCH,
    OTHER_PROCESSES,
    FREE,
)
# What the engine spends its budget on besides the pool, in the waterfall's order.
BUDGET_TERMS: tuple[LedgerTerm, ...] = (WEIGHTS, ACTIVATION, NON_TORCH, CUDA_GRAPH)
TERMS: tuple[LedgerTerm, ...] = (*CARD_TERMS, UNATTRIBUTED)
# The fact holding the card total each ledger balances against.
TOTAL_FACT = "gpu_total_bytes"

_BY_KEY = {t.key: t for t in TERMS}


def term(key: str) -> LedgerTerm:
    """The term spelled `key`; KeyError for a key that is no term."""
    return _BY_KEY[key]


def budget(total: float, utilization: float) -> float:
    """What the engine may use of the card: total x gpu_memory_utilization (or SGLang's
    mem_fraction_static)."""
    return total * utilization


def unattributed(whole: float, stated: Iterable[float]) -> float:
    """What of `whole` the stated terms do not account for (negative when they overshoot it,
    as rounded printed terms may by a few hundredths)."""
    return whole - sum(stated)
