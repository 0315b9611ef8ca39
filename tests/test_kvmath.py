"""kvmath against the worked examples of domain.md §2 and §6 (the documented oracles)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdiag.domain import dtypes, kvmath
from kvdiag.domain.kvmath import KvLayout
from kvdiag.domain.units import GIB, KIB

LLAMA2_7B = KvLayout(full_layers=32, kv_heads=32, head_dim=128, dtype="float16")
LLAMA2_70B = KvLayout(full_layers=80, kv_heads=8, head_dim=128, dtype="float16")
DEEPSEEK_V3 = KvLayout(
    full_layers=61,
    kv_heads=128,
    head_dim=56,
    dtype="bfloat16",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
)
TINY = KvLayout(full_layers=4, kv_heads=2, head_dim=64, dtype="bfloat16")  # the real runs' model


def test_llama2_7b_is_512_kib_per_token_and_2_gib_at_4096_tokens() -> None:
    assert kvmath.bytes_per_token_per_layer(LLAMA2_7B) == 16 * KIB  # K 8 KiB + V 8 KiB
    assert kvmath.kv_bytes_per_token(LLAMA2_7B) == 512 * KIB
    assert kvmath.kv_bytes_for_tokens(LLAMA2_7B, 4096) == 2 * GIB


def test_32_requests_at_2048_tokens_need_32_gib_on_llama2_7b() -> None:
    per_token = kvmath.kv_bytes_per_token(LLAMA2_7B)
    assert kvmath.demand_bytes(per_token, 32, 2048) == 32 * GIB


def test_70b_gqa_uses_kv_heads_not_attention_heads() -> None:
    per_token = kvmath.kv_bytes_per_token(LLAMA2_70B)
    assert per_token == 320 * KIB
    assert kvmath.kv_bytes_for_tokens(LLAMA2_70B, 8192) == 2.5 * GIB
    # 100 such requests: about 250 GB, three or four 80 GB cards of KV alone.
    total = kvmath.demand_bytes(per_token, 100, 8192)
    assert total == 250 * GIB
    assert kvmath.cards_for(total, 80 * GIB) == 4
    assert kvmath.cards_for(total, 80e9) == 4


def test_deepseek_v3_mla_is_70272_bytes_per_token_on_every_rank() -> None:
    for tp in (1, 2, 8, 16):
        assert kvmath.kv_bytes_per_token(DEEPSEEK_V3, tp=tp) == 70_272


def test_the_real_tiny_model_is_2048_bytes_per_token() -> None:
    assert kvmath.kv_bytes_per_token(TINY) == 2048


def test_tensor_parallel_splits_kv_heads_and_replicates_below_one_per_rank() -> None:
    assert kvmath.kv_heads_per_rank(8, 2) == 4
    assert kvmath.kv_heads_per_rank(8, 8) == 1
    assert kvmath.kv_heads_per_rank(8, 16) == 1  # replicated: each GPU still holds one head
    assert kvmath.kv_bytes_per_token(LLAMA2_70B, tp=4) == 80 * KIB
    assert kvmath.kv_bytes_per_token(LLAMA2_70B, tp=16) == 40 * KIB
    with pytest.raises(ValueError):
        kvmath.kv_heads_per_rank(8, 3)


def test_fp8_kv_halves_bytes_and_auto_means_the_model_dtype() -> None:
    assert kvmath.kv_bytes_per_token(LLAMA2_7B, kv_dtype="fp8") == 256 * KIB
    assert kvmath.kv_bytes_per_token(LLAMA2_7B, kv_dtype="auto") == 512 * KIB
    with pytest.raises(dtypes.UnknownDtype):
        kvmath.kv_bytes_per_token(LLAMA2_7B, kv_dtype="mystery8")


def test_sliding_window_layers_hold_at_most_the_window() -> None:
    # Gemma-3-style: 5 of 6 layers slide over 1,024 tokens, 1 in 6 is global.
    layout = KvLayout(
        full_layers=1,
        kv_heads=1,
        head_dim=128,
        dtype="bfloat16",
        sliding_layers=5,
        sliding_window=1024,
    )
    per_layer = 2 * 1 * 128 * 2
    assert kvmath.kv_bytes_per_token(layout) == 6 * per_layer
    assert kvmath.kv_bytes_for_tokens(layout, 512) == 6 * per_layer * 512
    assert kvmath.kv_bytes_for_tokens(layout, 8192) == per_layer * (8192 + 5 * 1024)


def test_static_batch_of_16_carries_18_percent_payload() -> None:
    lengths = [2048] + [256] * 15
    assert len(lengths) * max(lengths) == 32_768
    assert sum(lengths) == 5_888
    assert round(kvmath.static_batch_payload(lengths), 2) == 0.18


def test_a_one_token_request_holds_a_whole_16_token_block() -> None:
    assert kvmath.blocks_for_tokens(1, 16) == 1
    assert kvmath.empty_slots(1, 16) == 15
    assert kvmath.empty_slots(32, 16) == 0
    assert kvmath.paged_payload([1], 16) == 1 / 16


def test_pool_headroom_examples() -> None:
    # Pool 50 GB, 18 requests of 2.5 GB: 90 % used, room for 2 more.
    assert kvmath.usage(18 * 2.5, 50) == pytest.approx(0.9)
    assert kvmath.requests_that_fit(50 - 18 * 2.5, 2.5) == 2
    # 24 requests at 1.5 GB now look like 72 % with room for 9; at 2.5 GB each they need 60.
    assert kvmath.usage(24 * 1.5, 50) == pytest.approx(0.72)
    assert kvmath.requests_that_fit(50 - 24 * 1.5, 1.5) == 9
    assert 24 * 2.5 > 50
    # Admission must count prompt + max_tokens: 6,000 + 2,000.
    assert kvmath.peak_request_tokens(6000, 2000) == 8000


def test_pool_tokens_from_the_real_runs_flags() -> None:
    """--kv-cache-memory-bytes 17M at 2,048 B/token, 128-token blocks: 68 blocks, 8,704 tokens."""
    assert kvmath.pool_tokens_from_bytes(17 * 2**20, 2048, 128) == 8704
    assert kvmath.pool_tokens_from_bytes(2**30, 2048, 128) == 524_288


@given(
    layers=st.integers(1, 128),
    kv_heads=st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
    head_dim=st.sampled_from([64, 80, 96, 128, 256]),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_per_gpu_bytes_times_ranks_covers_the_model(
    layers: int, kv_heads: int, head_dim: int, tp: int
) -> None:
    """Split heads add up to the whole; replicated heads only ever add (never lose) bytes."""
    layout = KvLayout(full_layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype="bf16")
    whole = kvmath.kv_bytes_per_token(layout)
    per_gpu = kvmath.kv_bytes_per_token(layout, tp=tp)
    if kv_heads >= tp:
        assert per_gpu * tp == whole
    else:
        assert per_gpu == 2 * layers * head_dim * 2
