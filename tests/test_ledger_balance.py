"""The ledger balances on real start-up logs: the domain's budget is the engine's own printed
product, and the printed terms account for it within the log's rounding (domain.md §1, §3.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvdiag.analyzer import model as facts
from kvdiag.analyzer.ingest.base import IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.card import card
from kvdiag.analyzer.model.quantities.ledger import Ledger, waterfall
from kvdiag.analyzer.store.database import Store
from kvdiag.domain.ledger import budget, unattributed
from kvdiag.rules.base import RuleContext
from kvdiag.rules.kv102_shrunken_pool import ShrunkenPool
from tests.conftest import FIXTURES
from tests.ingest_helpers import kind_of

PRINTED = 0.005  # the logs print GiB to two decimals


def _tolerance(printed_figures: int) -> float:
    return PRINTED * printed_figures + 1e-9


@pytest.fixture
def context(request: pytest.FixtureRequest) -> Iterator[RuleContext]:
    """A store of every input of the fixture named by the test's parameter, as rules see it."""
    store = Store()
    incident = FIXTURES / request.param / "incident"
    for path in sorted(p for p in incident.rglob("*") if p.is_file()):
        if (kind := kind_of(path)) is None:
            continue
        unit = InputUnit(kind, path.name, (path,), (path.name,), path.stat().st_size, "")
        ingest = IngestContext(path.parent, None, None, None)
        for emit in INGESTERS_BY_KIND[kind]().ingest(unit, ingest):
            if isinstance(emit, TableBatch):
                store.append(emit.table, emit.frame, emit.series)
    store.flush()
    reader = store.reader
    try:
        yield RuleContext(ShrunkenPool(), Incident(reader, facts.establish(reader)), {})
    finally:
        store.discard()


@pytest.mark.parametrize("context", ["gpu-shrunken-pool-a100-case-study"], indirect=True)
def test_the_case_studys_card_balances(context: RuleContext) -> None:
    # vLLM 0.6.6 on an A100-80G: 79.15 GiB x 0.90 = 71.24 GiB; weights 12.55 (12.5523 GB when
    # loaded), non-torch 0.62, activation 41.31, KV 16.76; graphs 0.54 captured afterwards.
    ledger = card(context, None).ledger()
    assert ledger is not None
    printed_budget = context.sql("SELECT requested_gib FROM log_memory WHERE requested_gib > 0")
    assert ledger.budget_gib == pytest.approx(printed_budget.item(), abs=_tolerance(2))
    steps = waterfall(ledger)
    assert [label for label, _ in steps[2:-2]] == [
        "model weights",
        "activation peak (profiling)",
        "non-torch memory (NCCL, CUDA context)",
    ]
    # Card total = what the utilization keeps outside the budget + each term + the KV pool.
    (_, total), spent, (pool_label, pool) = steps[0], steps[1:-2], steps[-2]
    assert pool_label == "KV pool"
    balance = unattributed(total, [*(-gib for _, gib in spent), pool])
    assert balance == pytest.approx(0, abs=_tolerance(5))
    # Before 0.20 the graphs come out of the margin outside the budget, which holds them.
    assert ledger.graphs_outside and ledger.cuda_graph_gib == pytest.approx(0.54)
    assert ledger.cuda_graph_gib < ledger.outside_budget_gib
    assert "unattributed" not in dict(ledger.terms())


_PER_RANK = """
    SELECT m.rank, m.total_gib, m.utilization, m.requested_gib, m.weights_gib,
           m.activation_gib, m.non_torch_gib, m.cuda_graph_gib, p.gib AS kv_gib
    FROM log_memory m JOIN log_kv_pool p ON p.rank = m.rank AND p.event = 'available_kv_memory'
    WHERE m.event = 'free_memory' ORDER BY m.rank
"""


@pytest.mark.parametrize("context", ["gpu-tp8-l40s-startup-real"], indirect=True)
def test_every_rank_of_a_real_tp8_start_up_balances(context: RuleContext) -> None:
    # The real vLLM 0.10.2 log: each rank prints its own non-torch memory and KV pool
    # (10.64-10.68 GiB); each rank's own figures account for its 39.98 GiB budget.
    rows = context.sql(_PER_RANK).to_dicts()
    assert [r["rank"] for r in rows] == list(range(8))
    for r in rows:
        assert budget(r["total_gib"], r["utilization"]) == pytest.approx(
            r["requested_gib"], abs=_tolerance(2)
        )
        stated = [r["weights_gib"], r["activation_gib"], r["non_torch_gib"], r["kv_gib"]]
        rest = unattributed(budget(r["total_gib"], r["utilization"]), stated)
        assert rest == pytest.approx(0, abs=_tolerance(5)), r
        ledger = Ledger(
            r["total_gib"],
            r["utilization"],
            r["kv_gib"],
            r["weights_gib"],
            r["activation_gib"],
            r["non_torch_gib"],
            r["cuda_graph_gib"],
        )
        # 3.45 GiB of graphs on top of a balanced budget: the 0.10 engine sized the pool first.
        assert ledger.graphs_outside and "unattributed" not in dict(ledger.terms())
