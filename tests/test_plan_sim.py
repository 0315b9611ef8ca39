"""The scheduler model's invariants, whatever the load and the engine: every request ends
(finished, or refused because it cannot fit the whole pool), the caps hold, a pool that
holds everything preempts nothing, and a closed loop never has more in flight than it has
clients. Plus the load read without a request log: from the counters, with the seed said."""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.model.traffic import COUNTERS
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.plan import PlanOptions, plan_incident
from kvdiag.plan.sim import Engine, Request, StepModel, simulate
from tests.conftest import FIXTURES

STEP = StepModel(0.01, 0.0005, 0.001, 1e-6)

requests = st.lists(
    st.builds(
        Request,
        arrival=st.floats(0, 100, allow_nan=False),
        prompt=st.integers(1, 3000),
        output=st.integers(1, 500),
    ),
    min_size=1,
    max_size=60,
)
engines = st.builds(
    Engine,
    blocks=st.integers(1, 400),
    block_size=st.sampled_from([16, 32, 128]),
    max_num_seqs=st.integers(1, 64),
    max_batched_tokens=st.sampled_from([512, 2048, 8192]),
    step=st.just(STEP),
)


@settings(max_examples=60, deadline=None)
@given(requests, engines)
def test_every_request_ends_and_the_caps_hold(load: list[Request], engine: Engine) -> None:
    result = simulate(tuple(load), engine)
    assert result.finished + result.rejections == len(load)
    assert result.max_running <= engine.max_num_seqs
    assert 0.0 <= result.peak_usage <= 1.0
    assert all(q >= 0 for q in result.queue_times)
    assert len(result.ttfts) >= result.finished


@settings(max_examples=40, deadline=None)
@given(requests, st.sampled_from([16, 128]))
def test_a_pool_that_holds_everything_preempts_nothing(load: list[Request], bs: int) -> None:
    need = sum(-(-(r.prompt + r.output) // bs) for r in load)
    result = simulate(tuple(load), Engine(need + 1, bs, 1024, 8192, STEP))
    assert result.preemptions == 0 and result.rejections == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(2, 8), engines)
def test_a_closed_loop_holds_no_more_in_flight_than_its_clients(
    clients: int, each: int, engine: Engine
) -> None:
    load: list[Request] = []
    for _ in range(clients):
        for k in range(each):
            load.append(Request(0.0, 50, 20, after=None if k == 0 else len(load) - 1))
    result = simulate(tuple(load), engine)
    assert result.max_running <= clients and result.max_waiting <= clients
    assert result.finished + result.rejections == clients * each


def test_without_a_request_log_the_counters_give_the_load(tmp_path: Path) -> None:
    """b-saturation without its client log: requests per scrape from request_success,
    lengths drawn from the histograms with a stated seed; the baseline still reproduces."""
    incident = tmp_path / "b"
    shutil.copytree(FIXTURES / "vllm-b-saturation" / "incident", incident)
    (incident / "requests.jsonl").unlink()
    plan = plan_incident(
        incident, AnalyzeOptions(incident=incident), PlanOptions(("--max-num-seqs", "4"), seed=7)
    )
    assert plan.load.source == COUNTERS and plan.load.seed == 7
    assert plan.load.requests == 36  # vllm:request_success_total rose by 36
    assert plan.simulated.preemptions and plan.simulated.peak_kv_usage == 1.0
    assert any("seed 7" in n for n in plan.notes)
    assert plan.scenarios[0].range["max_waiting"][0] < plan.scenarios[0].range["max_waiting"][1]


def test_a_fleet_is_refused_with_the_way_out() -> None:
    import pytest

    from kvdiag.plan import NotPlannableError

    incident = FIXTURES / "vllm-g-replica-imbalance" / "incident"
    with pytest.raises(NotPlannableError, match="one replica's folder"):
        plan_incident(
            incident, AnalyzeOptions(incident=incident), PlanOptions(("--max-num-seqs", "4"))
        )


def test_a_request_that_outgrows_the_pool_alone_is_refused_not_replayed_forever() -> None:
    # 10 blocks of 16 = 160 tokens; 100 prompt + 100 generated outgrow it by itself.
    result = simulate((Request(0.0, 100, 100), Request(0.0, 20, 5)), Engine(10, 16, 8, 512, STEP))
    assert result.rejections == 1 and result.finished == 1
