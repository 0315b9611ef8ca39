"""KV dtypes against the engines' own tables, read from their source releases.

The oracles below were copied from the vLLM and SGLang source distributions (PyPI sdists),
file:line per release, not from kvdiag: every value `--kv-cache-dtype` accepted in a release
must have a size in kvdiag, and that size must be the element size of the torch dtype the
engine allocates for it.
"""

from __future__ import annotations

import pytest

from kvdiag.domain import dtypes, kvmath
from kvdiag.domain.kvmath import KvLayout
from kvdiag.domain.units import KIB

# torch.tensor([], dtype=torch.<name>).element_size() (torch docs, "torch.dtype" table and
# Tensor.element_size); float4_e2m1fn_x2 holds two fp4 values in one byte.
TORCH_SIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float4_e2m1fn_x2": 1,
}

# vLLM's STR_DTYPE_TO_TORCH_DTYPE: per release, the names its table added (and some it kept,
# to show them unchanged); torch.half is float16, torch.float float32.
_U8 = "uint8"
VLLM_STR_DTYPE_TO_TORCH = {
    # 0.3.0 vllm/utils.py:27
    "0.3.0": {"half": "float16", "bfloat16": "bfloat16", "float": "float32", "fp8_e5m2": _U8},
    # 0.4.3 vllm/utils.py:30 (0.5.5 :119, 0.6.6 :140, 0.7.3 :145 the same)
    "0.4.3": {
        "half": "float16",
        "bfloat16": "bfloat16",
        "float": "float32",
        "fp8": _U8,
        "fp8_e4m3": _U8,
        "fp8_e5m2": _U8,
    },
    # 0.8.5 vllm/utils.py:161 (0.9.2 vllm/utils/__init__.py:171 the same): + int8
    "0.8.5": {"fp8": _U8, "fp8_e4m3": _U8, "fp8_e5m2": _U8, "int8": "int8"},
    # 0.10.0 vllm/utils/__init__.py:169: + fp8_inc
    "0.10.0": {"int8": "int8", "fp8_inc": "float8_e4m3fn"},
    # 0.10.2 vllm/utils/__init__.py:176: + float32
    "0.10.2": {"float32": "float32", "fp8_inc": "float8_e4m3fn"},
    # 0.11.0 vllm/utils/__init__.py:123: + fp8_ds_mla
    "0.11.0": {"fp8_ds_mla": _U8},
    # 0.17.0 vllm/utils/torch_utils.py:33 (0.12.0 :28 without float16): + float16
    "0.17.0": {"float16": "float16", "half": "float16", "fp8_ds_mla": _U8},
    # 0.20.0 vllm/utils/torch_utils.py:31
    "0.20.0": {
        "int8_per_token_head": "int8",
        "fp8_per_token_head": _U8,
        "turboquant_k8v4": _U8,
        "turboquant_4bit_nc": _U8,
        "turboquant_k3v4_nc": _U8,
        "turboquant_3bit_nc": _U8,
        "nvfp4": _U8,
    },
    # 0.25.0 vllm/utils/torch_utils.py:32
    "0.25.0": {"int4_per_token_head": _U8},
    # 0.28.0 vllm/utils/torch_utils.py:33
    "0.28.0": {"nvfp4_4over6": _U8},
    # 0.30.0 vllm/utils/torch_utils.py:33
    "0.30.0": {"nvfp4_ds_mla": _U8},
    # 0.33.0 vllm/utils/torch_utils.py:40
    "0.33.0": {
        "octave_k3v4": _U8,
        "octave_k3v3": _U8,
        "octave_k3v3_compact": _U8,
        "ultraquant_4bit": _U8,
        "float32": "float32",
        "float": "float32",
        "bfloat16": "bfloat16",
    },
}

# What `--kv-cache-dtype` accepted: argparse choices, then the CacheDType Literal.
VLLM_ACCEPTED = {
    "0.3.0": ("auto", "fp8_e5m2"),  # vllm/engine/arg_utils.py:129 choices
    "0.4.3": ("auto", "fp8", "fp8_e5m2", "fp8_e4m3"),  # arg_utils.py:195 (0.5.5 :251, 0.7.3 :361)
    "0.8.5": ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),  # vllm/config.py:1291 CacheDType
    "0.10.0": ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),  # vllm/config.py:1609
    # vllm/config/cache.py:25
    "0.11.0": ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),
    # vllm/config/cache.py:23 (0.17.0 :24 the same)
    "0.12.0": ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"),
    # vllm/config/cache.py:18
    "0.20.0": (
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_inc",
        "fp8_ds_mla",
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
    ),
    "0.25.0": ("int4_per_token_head",),  # vllm/config/cache.py:19, + this
    "0.28.0": ("nvfp4_4over6",),  # vllm/config/cache.py:19, + this
    "0.30.0": ("nvfp4_ds_mla",),  # vllm/config/cache.py:39, + this
    # vllm/config/cache.py:44, + these
    "0.33.0": ("octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit"),
}

# SGLang python/sglang/srt/server_args.py --kv-cache-dtype choices, and the torch dtype
# model_executor/model_runner.py (0.5.10 :1902 configure_kv_cache_dtype) picks on CUDA.
SGLANG_ACCEPTED = {
    "0.2.15": ("auto", "fp8_e5m2"),  # server_args.py:204 (0.3.6 :283 the same)
    "0.4.6": ("auto", "fp8_e5m2", "fp8_e4m3"),  # server_args.py:486
    "0.5.10": ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"),  # :3860
}
SGLANG_TORCH = {
    "fp8_e5m2": "float8_e5m2",
    "fp8_e4m3": "float8_e4m3fn",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
}

VLLM_NAMES = sorted({n for table in VLLM_STR_DTYPE_TO_TORCH.values() for n in table})
VLLM_FLAG_VALUES = sorted({v for values in VLLM_ACCEPTED.values() for v in values} - {"auto"})


def _vllm_torch(name: str) -> str:
    (torch_dtype,) = {t[name] for t in VLLM_STR_DTYPE_TO_TORCH.values() if name in t}
    return torch_dtype


@pytest.mark.parametrize("name", VLLM_NAMES)
def test_every_vllm_dtype_name_is_the_element_size_of_its_torch_dtype(name: str) -> None:
    assert dtypes.storage_dtype(name) == _vllm_torch(name)
    assert dtypes.element_bytes(name) == TORCH_SIZE[_vllm_torch(name)]


@pytest.mark.parametrize("value", VLLM_FLAG_VALUES)
def test_every_accepted_vllm_kv_cache_dtype_has_a_size(value: str) -> None:
    assert value in dtypes.VLLM_KV_CACHE_DTYPES
    assert dtypes.element_bytes(value) == TORCH_SIZE[_vllm_torch(value)]


def test_kvdiag_accepts_no_vllm_value_the_releases_did_not() -> None:
    accepted = {v for values in VLLM_ACCEPTED.values() for v in values}
    assert accepted == dtypes.VLLM_KV_CACHE_DTYPES
    assert set(dtypes.VLLM_STORAGE_DTYPE) == set(VLLM_NAMES)


@pytest.mark.parametrize("value", sorted(set(SGLANG_TORCH)))
def test_every_sglang_kv_cache_dtype_is_the_element_size_of_its_torch_dtype(value: str) -> None:
    assert dtypes.storage_dtype(value, engine="sglang") == SGLANG_TORCH[value]
    # element_bytes asks no engine: a name both define must be one size in both.
    assert dtypes.element_bytes(value) == TORCH_SIZE[SGLANG_TORCH[value]]
    assert {v for vs in SGLANG_ACCEPTED.values() for v in vs} == dtypes.SGLANG_KV_CACHE_DTYPES


def test_the_names_the_two_old_tables_disagreed_on() -> None:
    # fp8_inc is torch.float8_e4m3fn, "float" is torch.float32 (kvbytes said 2 for both).
    assert dtypes.element_bytes("fp8_inc") == 1
    assert dtypes.element_bytes("float8_e4m3fn") == 1
    assert dtypes.element_bytes("float") == 4
    assert dtypes.element_bytes("torch.bfloat16") == 2


@pytest.mark.parametrize("value", [*VLLM_FLAG_VALUES, *SGLANG_TORCH])
def test_every_accepted_value_is_sized_per_token_or_refused_not_unknown(value: str) -> None:
    """A head vector of 128 values: a number, or UnsizedKvFormat for backend-sized slots."""
    try:
        size = dtypes.kv_vector_bytes(value, 128)
    except dtypes.UnsizedKvFormat:
        assert value.startswith(("turboquant_", "octave_", "ultraquant_")) or "ds_mla" in value
        return
    assert 0 < size <= 128 * dtypes.element_bytes(value) + 4


def test_packed_formats_take_what_the_engines_allocate() -> None:
    # vLLM nvfp4_kv_cache_full_dim (0.25.0 vllm/utils/torch_utils.py:414): head // 2 + head // 16.
    assert dtypes.kv_vector_bytes("nvfp4", 128) == 64 + 8
    assert dtypes.kv_vector_bytes("nvfp4_4over6", 128) == 72
    # SGLang's fp4 pool (0.5.10 mem_cache/memory_pool.py:1099-1129): k // 2 values, k // 16 scales.
    assert dtypes.kv_vector_bytes("fp4_e2m1", 128) == 72
    # Per-token-head modes: data plus one float32 scale per K and per V vector (0.25.0
    # vllm/v1/kv_cache_interface.py:178, 0.33.0 v1/attention/backends/triton_attn.py:316).
    assert dtypes.kv_vector_bytes("int8_per_token_head", 128) == 128 + 4
    assert dtypes.kv_vector_bytes("fp8_per_token_head", 128) == 128 + 4
    assert dtypes.kv_vector_bytes("int4_per_token_head", 128) == 64 + 4
    with pytest.raises(dtypes.UnsizedKvFormat):
        dtypes.kv_vector_bytes("turboquant_k8v4", 128)
    with pytest.raises(dtypes.UnsizedKvFormat):
        dtypes.dense_element_bytes("nvfp4")


def test_llama3_8b_under_nvfp4_and_deepseek_under_fp8_ds_mla() -> None:
    llama3_8b = KvLayout(full_layers=32, kv_heads=8, head_dim=128, dtype="bfloat16")
    assert kvmath.kv_bytes_per_token(llama3_8b) == 128 * KIB
    assert kvmath.kv_bytes_per_token(llama3_8b, kv_dtype="nvfp4") == 32 * 2 * 8 * 72
    # 0.12.0 vllm/v1/kv_cache_interface.py:168: fp8_ds_mla pages are 656 bytes a token.
    deepseek = KvLayout(61, 128, 56, "bfloat16", kv_lora_rank=512, qk_rope_head_dim=64)
    assert kvmath.kv_bytes_per_token(deepseek, kv_dtype="fp8_ds_mla") == 61 * 656
    assert kvmath.kv_bytes_per_token(deepseek, kv_dtype="fp8") == 61 * 576
    with pytest.raises(dtypes.UnsizedKvFormat):
        kvmath.kv_bytes_per_token(deepseek, kv_dtype="nvfp4")
    with pytest.raises(dtypes.UnsizedKvFormat):
        kvmath.kv_bytes_per_token(llama3_8b, kv_dtype="fp8_ds_mla")


def test_auto_is_the_model_dtype_as_the_engine_resolves_it() -> None:
    assert dtypes.resolve_kv_dtype("auto", "bfloat16") == "bfloat16"
    assert dtypes.resolve_kv_dtype(None, "torch.float16") == "float16"
    assert dtypes.resolve_kv_dtype("FP8", "bfloat16") == "fp8"
    with pytest.raises(dtypes.UnknownDtype):
        dtypes.resolve_kv_dtype("auto", None)
    # --dtype auto downcasts a float32 checkpoint to 16 bits (0.6.6 vllm/config.py:2224,
    # 0.33.0 vllm/config/model.py:2441); a stated --dtype (or the log's) is kept.
    assert dtypes.element_bytes(dtypes.auto_model_dtype("float32")) == 2
    assert dtypes.auto_model_dtype("bfloat16") == "bfloat16"
    assert dtypes.auto_model_dtype("float32", "float32") == "float32"
    assert dtypes.auto_model_dtype("bfloat16", "torch.float16") == "float16"
    assert dtypes.auto_model_dtype("bfloat16", "auto") == "bfloat16"
    with pytest.raises(dtypes.UnknownDtype):
        dtypes.auto_model_dtype(None)


def test_fp8_shrinks_16_bit_caches_by_2_and_nothing_already_8_bit() -> None:
    assert dtypes.fp8_shrink_factor(None) == 2
    assert dtypes.fp8_shrink_factor("auto") == 2
    assert dtypes.fp8_shrink_factor("float16") == 2
    assert dtypes.fp8_shrink_factor("float32") == 4
    for quantized in ("fp8", "fp8_inc", "int8_per_token_head", "nvfp4", "turboquant_k8v4"):
        assert dtypes.fp8_shrink_factor(quantized) is None, quantized
    assert dtypes.fp8_shrink_factor("mystery8") is None
