"""The worked examples of domain.md §6 are oracles for the rules' arithmetic."""

from __future__ import annotations

import pytest

from kvdiag.analyzer.model.quantities import demand, ledger, payload
from kvdiag.domain import kvmath
from kvdiag.domain.kvmath import KvLayout
from kvdiag.domain.units import GIB, KIB


def _per_token(layers: int, kv_heads: int, head_dim: int, dtype: str, tp: int = 1) -> int:
    layout = KvLayout(full_layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)
    return kvmath.kv_bytes_per_token(layout, tp)


def test_llama2_7b_bytes_per_token_and_a_4k_request() -> None:
    per_token = _per_token(32, 32, 128, "float16")
    assert per_token == 512 * KIB  # K 8 KiB + V 8 KiB per layer, 32 layers
    assert per_token * 4096 == 2 * GIB
    # 32 requests at 2,048 tokens average = 32 GiB, above the 14 GB of weights.
    assert 32 * 2048 * per_token == 32 * GIB


def test_70b_gqa_bytes_per_token_and_cards_needed() -> None:
    per_token = _per_token(80, 8, 128, "bfloat16")
    assert per_token == 320 * KIB
    assert per_token * 8192 / GIB == pytest.approx(2.5)
    hundred = 100 * per_token * 8192 / GIB
    assert hundred == pytest.approx(250)
    assert demand.cards_needed(hundred, 80) == 4  # "three or four 80 GB cards of KV alone"


def test_tp_splits_kv_heads_but_never_below_one() -> None:
    assert _per_token(80, 8, 128, "float16", tp=4) == 80 * KIB
    assert _per_token(80, 8, 128, "float16", tp=16) == _per_token(80, 8, 128, "float16", tp=8)


def test_mla_and_the_real_tiny_model() -> None:
    deepseek_v3 = KvLayout(61, 128, 56, "bfloat16", kv_lora_rank=512, qk_rope_head_dim=64)
    assert kvmath.kv_bytes_per_token(deepseek_v3) == 70_272
    assert _per_token(4, 2, 64, "bfloat16") == 2048
    assert _per_token(4, 2, 64, "fp8_e4m3") == 1024


def test_pool_of_50_gb_with_long_requests() -> None:
    used = 18 * 2.5
    assert used == 45 and used / 50 == 0.9
    assert demand.more_that_fit(50, used, 2.5) == 2


def test_current_usage_understates_the_risk() -> None:
    now = demand.Demand(24, 1.5, 50)
    assert now.total == 36 and now.ratio == pytest.approx(0.72)
    assert demand.more_that_fit(50, now.total, 1.5) == 9  # apparently room for 9 more
    peak = demand.Demand(24, 2.5, 50)
    assert peak.total == 60 and peak.exceeds


def test_admission_counts_the_peak_not_the_current_length() -> None:
    assert demand.Demand(1, 6000 + 2000, 10**6).total == 8000


def test_max_num_seqs_that_keeps_the_worst_case_under_the_pool() -> None:
    # The real saturation run: 8,704-token pool (68 blocks of 128), requests of ~2,016 tokens.
    assert demand.seqs_cap(8704, 2016, 128) == 4
    assert demand.Demand(4, demand.slots(2016, 128), 8704).exceeds is False
    assert demand.Demand(5, demand.slots(2016, 128), 8704).exceeds is True


def test_static_batch_padding_payload() -> None:
    batch = payload.static_batch([2048] + [256] * 15)
    assert batch.allocated == 32_768 and batch.effective == 5_888
    assert batch.ratio == pytest.approx(0.18, abs=0.005)


def test_block_rounding_leaves_up_to_block_size_minus_one_empty() -> None:
    one = payload.paged([1], 16)
    assert one.allocated == 16 and one.empty == 15
    assert payload.paged([2048], 16).empty == 0


def test_shared_prefix_recomputed_per_request() -> None:
    assert payload.prefix_recompute(5000, 20) == 100_000
    assert payload.prefix_recompute(3000, 12) == 36_000


def test_a100_7b_nominal_pool_is_50_gb_or_more() -> None:
    total = 80.0
    nominal = ledger.nominal_pool_gib(total, 0.9, 14.0, 0.08)
    assert nominal >= 50
    # "a start-up log showing 12 GB means the pool was squeezed"
    assert 12 / nominal < 0.3


def test_squeezed_pool_ledger_names_the_term_that_ate_the_budget() -> None:
    # The case study's card: 18 GB pool on an A100-80G (79.15 GiB as torch reports it).
    case = ledger.Ledger(
        total_gib=79.15,
        utilization=0.9,
        pool_gib=16.76,
        weights_gib=12.55,
        activation_gib=36.2,
        non_torch_gib=0.61,
        cuda_graph_gib=5.12,
    )
    assert case.budget_gib == pytest.approx(71.235)
    assert case.largest_consumer() == ("activation", 36.2)
    steps = ledger.waterfall(case)
    assert steps[0] == ("card total", 79.15)
    assert steps[-1] == ("KV pool", 16.76)
    assert sum(g for _, g in steps[:-1]) == pytest.approx(16.76, abs=0.01)


def test_unprinted_terms_show_as_not_attributed() -> None:
    case = ledger.Ledger(total_gib=79.15, utilization=0.9, pool_gib=16.76, weights_gib=12.55)
    name, gib = case.terms()[-1]
    assert name == "unattributed" and gib == pytest.approx(41.925)


def test_trend_gives_time_to_exhaustion() -> None:
    line = demand.trend([(0, 0.50), (10, 0.60), (20, 0.70), (30, 0.80)])
    assert line is not None and line.r2 == pytest.approx(1.0)
    assert line.seconds_to(1.0) == pytest.approx(20)
    falling = demand.trend([(0, 0.8), (10, 0.7), (20, 0.6)])
    assert falling is not None and falling.seconds_to(1.0) is None
    assert demand.trend([(0, 0.5), (1, 0.6)]) is None


def test_graphs_outside_the_budget_before_0_20() -> None:
    # The real 0.10.2 TP8 line: 39.98 GiB requested - 27.72 weights - 1.4 activation -
    # 0.18 non-torch = 10.68 GiB of KV; the 3.45 GiB of CUDA graphs came on top.
    real = ledger.Ledger(44.42, 0.9, 10.68, 27.72, 1.4, 0.18, 3.45)
    assert real.graphs_outside
    assert [n for n, _ in real.terms()] == ["weights", "activation", "non_torch"]
    assert ledger.waterfall(real)[-1] == ("CUDA graphs, from the margin outside the budget", -3.45)
    # 0.20+ profiles the graphs inside the budget: the terms then balance with them.
    inside = ledger.Ledger(79.15, 0.9, 16.76, 12.55, 36.2, 0.61, 5.12)
    assert not inside.graphs_outside
