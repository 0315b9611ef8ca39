"""Layer 1 arithmetic: the memory ledger of one GPU (domain.md §1, §3.1).

    budget   = card total x gpu_memory_utilization
    KV pool  = budget - weights - activation peak - non-torch - CUDA graphs

When every term is printed the ledger balances by construction; the question is then which
term ate the budget. When some are not, what is left over is reported as "not attributed"
(a co-tenant process, a card that was not empty at start, terms the log did not print).
The *nominal* pool is what the card would give after weights and a normal allowance for
the other terms; a pool well under it is a shrunken pool.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = float(2**30)
MIB = float(2**20)

TERM_LABELS = {
    "weights": "model weights",
    "activation": "activation peak (profiling)",
    "non_torch": "non-torch memory (NCCL, CUDA context)",
    "cuda_graph": "CUDA graphs",
    "unattributed": "not attributed (co-tenant, card not empty at start, unprinted terms)",
}


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
        return self.total_gib * self.utilization

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
        rest = self.budget_gib - self.pool_gib - sum(g for g in inside if g is not None)
        return abs(rest) <= 0.1 + 0.01 * self.budget_gib

    def terms(self) -> list[tuple[str, float]]:
        """The non-KV terms the inputs state, then whatever the budget does not account for."""
        named = [
            ("weights", self.weights_gib),
            ("activation", self.activation_gib),
            ("non_torch", self.non_torch_gib),
            ("cuda_graph", None if self.graphs_outside else self.cuda_graph_gib),
        ]
        out = [(name, gib) for name, gib in named if gib is not None]
        rest = self.budget_gib - self.pool_gib - sum(gib for _, gib in out)
        # Rounding in printed GiB leaves a few hundredths; only a real gap is worth a line.
        if rest > 0.05:
            out.append(("unattributed", rest))
        return out

    def largest_consumer(self) -> tuple[str, float] | None:
        """The non-weight term that took the most of the budget (weights are the model)."""
        others = [(n, g) for n, g in self.terms() if n != "weights"]
        return max(others, key=lambda t: t[1]) if others else None


def nominal_pool_gib(
    total_gib: float, utilization: float, weights_gib: float, allowance_frac: float
) -> float:
    """The pool the card should give: budget - weights - a normal allowance for the rest.

    Oracle (domain.md §6): A100-80G, weights about 14 GB, utilization 0.9 -> 50 GB or more.
    """
    return total_gib * utilization - weights_gib - allowance_frac * total_gib


def waterfall(ledger: Ledger, fraction: str = "gpu_memory_utilization") -> list[tuple[str, float]]:
    """Card total down to the KV pool, one signed step per term (GiB); `fraction` is the
    engine's name for the utilization (SGLang: mem_fraction_static)."""
    steps: list[tuple[str, float]] = [("card total", ledger.total_gib)]
    steps.append((f"kept outside {fraction} {ledger.utilization:g}", -ledger.outside_budget_gib))
    steps += [(TERM_LABELS[name], -gib) for name, gib in ledger.terms()]
    steps.append(("KV pool", ledger.pool_gib))
    if ledger.graphs_outside and ledger.cuda_graph_gib is not None:
        steps.append(("CUDA graphs, from the margin outside the budget", -ledger.cuda_graph_gib))
    return steps


def fmt_gib(gib: float) -> str:
    return f"{gib:,.2f} GiB" if gib < 100 else f"{gib:,.1f} GiB"
