"""Layer 1 arithmetic: the memory ledger of one GPU as the start-up log states it.

    budget   = card total x gpu_memory_utilization
    KV pool  = budget - weights - activation peak - non-torch - CUDA graphs

The terms, their labels and the balance are the domain's (kvdiag/domain/ledger.py); here is
what the findings need on top: a ledger in GiB, the judgement of where the CUDA graphs came
from, the nominal pool and the waterfall. When every term is printed the ledger balances by
construction; the question is then which term ate the budget. When some are not, what is
left over is reported as not attributed. The *nominal* pool is what the card would give
after weights and a normal allowance for the other terms; a pool well under it is shrunken.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvdiag.domain.ledger import (
    ACTIVATION,
    BUDGET_TERMS,
    CUDA_GRAPH,
    KV_POOL,
    NON_TORCH,
    UNATTRIBUTED,
    WEIGHTS,
    LedgerTerm,
    budget,
    term,
    unattributed,
)


@dataclass(frozen=True, slots=True)
class Ledger:
    """One GPU's start-up memory accounting, in GiB; None where the inputs do not say."""

    total_gib: float
    utilization: float
    pool_gib: float
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = None

    @property
    def budget_gib(self) -> float:
        return budget(self.total_gib, self.utilization)

    @property
    def outside_budget_gib(self) -> float:
        """What gpu_memory_utilization keeps off-limits on purpose."""
        return self.total_gib - self.budget_gib

    @property
    def graphs_outside(self) -> bool:
        """CUDA graphs captured after the pool was sized (vLLM before 0.20): the printed terms
        balance the budget without them, and the graphs come out of the margin outside it."""
        if self.cuda_graph_gib is None:
            return False
        inside = [self.weights_gib, self.activation_gib, self.non_torch_gib]
        rest = self._left_over(g for g in inside if g is not None)
        return abs(rest) <= 0.1 + 0.01 * self.budget_gib

    def terms(self) -> list[tuple[str, float]]:
        """The non-KV terms the inputs state (by key), then whatever the budget does not
        account for."""
        stated: dict[LedgerTerm, float | None] = {
            WEIGHTS: self.weights_gib,
            ACTIVATION: self.activation_gib,
            NON_TORCH: self.non_torch_gib,
            CUDA_GRAPH: None if self.graphs_outside else self.cuda_graph_gib,
        }
        out = [(t.key, gib) for t in BUDGET_TERMS if (gib := stated[t]) is not None]
        rest = self._left_over(gib for _, gib in out)
        # Rounding in printed GiB leaves a few hundredths; only a real gap is worth a line.
        if rest > 0.05:
            out.append((UNATTRIBUTED.key, rest))
        return out

    def largest_consumer(self) -> tuple[str, float] | None:
        """The non-weight term that took the most of the budget (weights are the model)."""
        others = [(n, g) for n, g in self.terms() if n != WEIGHTS.key]
        return max(others, key=lambda t: t[1]) if others else None

    def _left_over(self, stated: Iterable[float]) -> float:
        """What of the budget neither the pool nor the `stated` terms account for."""
        return unattributed(self.budget_gib - self.pool_gib, stated)


def nominal_pool_gib(
    total_gib: float, utilization: float, weights_gib: float, allowance_frac: float
) -> float:
    """The pool the card should give: budget - weights - a normal allowance for the rest.

    Oracle (domain.md §6): A100-80G, weights about 14 GB, utilization 0.9 -> 50 GB or more.
    """
    return budget(total_gib, utilization) - weights_gib - allowance_frac * total_gib


def waterfall(ledger: Ledger, fraction: str = "gpu_memory_utilization") -> list[tuple[str, float]]:
    """Card total down to the KV pool, one signed step per term (GiB); `fraction` is the
    engine's name for the utilization (SGLang: mem_fraction_static)."""
    steps: list[tuple[str, float]] = [("card total", ledger.total_gib)]
    steps.append((f"kept outside {fraction} {ledger.utilization:g}", -ledger.outside_budget_gib))
    steps += [(term(key).finding_label, -gib) for key, gib in ledger.terms()]
    steps.append((KV_POOL.finding_label, ledger.pool_gib))
    if ledger.graphs_outside and ledger.cuda_graph_gib is not None:
        label = f"{CUDA_GRAPH.finding_label}, from the margin outside the budget"
        steps.append((label, -ledger.cuda_graph_gib))
    return steps


def fmt_gib(gib: float) -> str:
    return f"{gib:,.2f} GiB" if gib < 100 else f"{gib:,.1f} GiB"
