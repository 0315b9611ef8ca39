"""The memory ledger per GPU, read from the diagnosis' facts.

The ledger splits a card's memory into what holds it (domain.md §1); its terms, the fact
carrying each and their labels are the domain's (kvdiag/domain/ledger.py). Per-GPU facts carry
a ("gpu", index) scope (and ("replica", name) when there are several). A fact without a gpu
scope holds for every GPU of its replica: engines size the same pool on every rank. Terms no
fact supplies are listed as absent, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvdiag.domain.fmt import to_bytes
from kvdiag.domain.ledger import CARD_TERMS, TOTAL_FACT, unattributed
from kvdiag.domain.records.diagnosis import Diagnosis, Fact

# The facts a card's ledger reads: its terms', then the total they balance against.
_FACTS: tuple[str, ...] = (*(t.fact for t in CARD_TERMS if t.fact is not None), TOTAL_FACT)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    key: str  # the domain's key of the term
    label: str  # its bar label
    bytes: float
    source: str  # "path:line" or the fact's note


@dataclass(frozen=True, slots=True)
class GpuLedger:
    """One GPU's memory: the terms present, the card total when known, the terms absent."""

    name: str  # "GPU 0", "replica a · GPU 1"
    entries: tuple[LedgerEntry, ...]
    total: float | None
    absent: tuple[str, ...]

    @property
    def unattributed(self) -> float | None:
        """Card memory no term accounts for (None without a total)."""
        if self.total is None:
            return None
        return unattributed(self.total, (e.bytes for e in self.entries))


def _facts(diagnosis: Diagnosis, name: str) -> Iterable[Fact]:
    found = diagnosis.facts.get(name)
    if found is None:
        return ()
    return found if isinstance(found, tuple) else (found,)


def _where(fact: Fact) -> str:
    return str(fact.source) if fact.source else (fact.note or "")


def _gpu_key(fact: Fact) -> tuple[str, str] | None:
    """(replica, gpu) of a per-GPU fact; None when the fact is not per GPU."""
    scope = dict(fact.scope)
    return (scope.get("replica", ""), scope["gpu"]) if "gpu" in scope else None


def _gpus(diagnosis: Diagnosis) -> list[tuple[str, str]]:
    keys = {
        key
        for name in _FACTS
        for fact in _facts(diagnosis, name)
        if (key := _gpu_key(fact)) is not None
    }
    return sorted(keys, key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 0, k[1]))


def _value_for(diagnosis: Diagnosis, name: str, gpu: tuple[str, str]) -> Fact | None:
    """The GPU's own fact, else its replica's unscoped one, else the global one."""
    facts = list(_facts(diagnosis, name))
    for fact in facts:
        if _gpu_key(fact) == gpu:
            return fact
    for fact in facts:
        scope = dict(fact.scope)
        if "gpu" not in scope and scope.get("replica", gpu[0]) == gpu[0]:
            return fact
    return None


def _ledger(diagnosis: Diagnosis, gpu: tuple[str, str], multi_replica: bool) -> GpuLedger:
    entries, absent = [], []
    for term in CARD_TERMS:
        fact = _value_for(diagnosis, term.fact, gpu) if term.fact is not None else None
        size = to_bytes(fact.value, fact.unit) if fact is not None else None
        if fact is None or size is None:
            absent.append(term.bar_label)
        else:
            entries.append(LedgerEntry(term.key, term.bar_label, size, _where(fact)))
    total_fact = _value_for(diagnosis, TOTAL_FACT, gpu)
    total = to_bytes(total_fact.value, total_fact.unit) if total_fact else None
    name = f"replica {gpu[0]} · GPU {gpu[1]}" if multi_replica else f"GPU {gpu[1]}"
    return GpuLedger(name, tuple(entries), total, tuple(absent))


def memory_ledgers(diagnosis: Diagnosis) -> tuple[GpuLedger, ...]:
    """One ledger per GPU that any per-GPU fact names; empty when none does."""
    gpus = _gpus(diagnosis)
    multi = len({replica for replica, _ in gpus}) > 1
    return tuple(_ledger(diagnosis, gpu, multi) for gpu in gpus)


def ledger_fact_names() -> tuple[str, ...]:
    """The fact names the ledger reads, for the report's 'absent' note."""
    return _FACTS
