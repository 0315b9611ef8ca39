"""Bytes a KV cache stores per element, by the dtype names vLLM and SGLang accept.

The tables are the engines' own, read from their sources (the release a value first
appears in is noted): vLLM maps `--kv-cache-dtype` to the torch dtype it allocates in
`STR_DTYPE_TO_TORCH_DTYPE` (vllm/utils.py, later vllm/utils/torch_utils.py) and lists the
accepted values in the flag's choices (vllm/engine/arg_utils.py) and later the `CacheDType`
Literal (vllm/config.py, later vllm/config/cache.py); SGLang maps its own choices in
ModelRunner.configure_kv_cache_dtype. tests/test_dtypes.py checks every value against them.

Quantized formats that pack two values per byte or keep scales beside the values are not
"bytes per element x head_dim": `kv_vector_bytes` gives the bytes one head's K (or V) vector
takes, as the engines size their pages, and refuses the formats whose layout a backend
chooses (it raises rather than guess).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdiag.domain.errors import KvdiagError

# torch.tensor([], dtype=d).element_size(), which vLLM's get_dtype_size returns. The fp4
# dtype holds two values in its one byte (the "_x2").
TORCH_ELEMENT_BYTES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "uint8": 1,
    "int8": 1,
    "float4_e2m1fn_x2": 1,
}

# vLLM's STR_DTYPE_TO_TORCH_DTYPE, the union over 0.3.0-0.33.0 (no name changed its dtype).
# fp8 is stored as uint8 and reinterpreted by the kernels.
VLLM_STORAGE_DTYPE: dict[str, str] = {
    "half": "float16",
    "bfloat16": "bfloat16",
    "float": "float32",
    "fp8_e5m2": "uint8",  # 0.3.0
    "fp8": "uint8",  # 0.4.x
    "fp8_e4m3": "uint8",
    "int8": "int8",  # 0.8.x
    "fp8_inc": "float8_e4m3fn",  # 0.10.0, Intel Gaudi
    "float32": "float32",  # 0.10.x
    "fp8_ds_mla": "uint8",  # 0.11.0, DeepSeek sparse MLA
    "float16": "float16",  # by 0.17.0
    "int8_per_token_head": "int8",  # by 0.20.0
    "fp8_per_token_head": "uint8",
    "turboquant_k8v4": "uint8",
    "turboquant_4bit_nc": "uint8",
    "turboquant_k3v4_nc": "uint8",
    "turboquant_3bit_nc": "uint8",
    "nvfp4": "uint8",
    "int4_per_token_head": "uint8",  # by 0.25.0
    "nvfp4_4over6": "uint8",  # by 0.28.0
    "nvfp4_ds_mla": "uint8",  # by 0.30.0
    "octave_k3v4": "uint8",  # by 0.33.0
    "octave_k3v3": "uint8",
    "octave_k3v3_compact": "uint8",
    "ultraquant_4bit": "uint8",
}

# What `--kv-cache-dtype` accepted in some release (argparse choices, then CacheDType).
VLLM_KV_CACHE_DTYPES: frozenset[str] = frozenset(
    {"auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla"}
    | {"bfloat16", "float16", "nvfp4", "nvfp4_4over6", "ultraquant_4bit"}
    | {"int4_per_token_head", "int8_per_token_head", "fp8_per_token_head"}
    | {"turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"}
    | {"octave_k3v4", "octave_k3v3", "octave_k3v3_compact"}
)

# SGLang's `--kv-cache-dtype` choices (0.2.x-0.5.x) and the torch dtype ModelRunner picks.
SGLANG_STORAGE_DTYPE: dict[str, str] = {
    "fp8_e5m2": "float8_e5m2",
    "fp8_e4m3": "float8_e4m3fn",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
}
SGLANG_KV_CACHE_DTYPES: frozenset[str] = frozenset({"auto", *SGLANG_STORAGE_DTYPE})

# A model's dtype as config.json (torch_dtype), `--dtype` or the engine's log line names it.
MODEL_DTYPES: dict[str, str] = {
    "half": "float16",
    "float16": "float16",
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
}


class UnknownDtype(KvdiagError, ValueError):
    """A dtype name neither engine defines: its size is not known (callers catch it)."""


class UnsizedKvFormat(KvdiagError, ValueError):
    """A KV format whose bytes per token depend on the attention backend's own layout."""


@dataclass(frozen=True, slots=True)
class Packing:
    """How one head's K (or V) vector of head_dim values is stored.

    `bits` per value; one 1-byte scale per `block` values (NVFP4, SGLang's fp4); and
    `scale_bytes` more per vector (a float32 scale per token and head). vLLM rounds the
    packed dims down (head_size // 2, head_size // 16), and so does this.
    """

    bits: int
    block: int | None = None
    scale_bytes: int = 0

    def vector_bytes(self, head_dim: int) -> int:
        data = head_dim // 2 if self.bits == 4 else head_dim * self.bits // 8
        scales = head_dim // self.block if self.block else 0
        return data + scales + self.scale_bytes


# Packed layouts, from vLLM's page sizing (kv_cache_interface.py, 0.20.0-0.33.0:
# nvfp4_kv_cache_full_dim = head_size // 2 + head_size // 16; per-token-head modes add one
# float32 scale per K and per V vector) and SGLang's MHATokenToKVPoolFP4 (k // 2 values,
# n * k // 16 scales).
_PACKED: dict[str, Packing] = {
    "nvfp4": Packing(4, block=16),
    "nvfp4_4over6": Packing(4, block=16),
    "fp4_e2m1": Packing(4, block=16),
    "int8_per_token_head": Packing(8, scale_bytes=4),
    "fp8_per_token_head": Packing(8, scale_bytes=4),
    "int4_per_token_head": Packing(4, scale_bytes=4),
}
# MLA formats stored as one opaque blob per token and layer (latent, rope part and scales).
_MLA_TOKEN_BYTES: dict[str, int] = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}
# Formats whose slot size each backend computes from its own quantizer's parameters.
_BACKEND_SIZED = ("turboquant_", "octave_", "ultraquant_")


def normalize(name: str) -> str:
    """A dtype name as the tables spell it: lower case, no "torch." prefix."""
    return name.strip().lower().removeprefix("torch.")


def is_auto(kv_cache_dtype: str | None) -> bool:
    """True when `--kv-cache-dtype` leaves the KV in the model's dtype (unset or "auto")."""
    return not kv_cache_dtype or normalize(kv_cache_dtype) == "auto"


def storage_dtype(name: str, engine: str = "vllm") -> str:
    """The torch dtype `engine` allocates for a dtype name (a flag value or a model dtype).

    The engines share some names with different dtypes of one size (SGLang's fp8_e4m3 is
    float8_e4m3fn, vLLM's uint8): the other engine's table answers names one lacks.
    """
    key = normalize(name)
    engines = (VLLM_STORAGE_DTYPE, SGLANG_STORAGE_DTYPE)
    for table in (MODEL_DTYPES, *(engines[::-1] if engine == "sglang" else engines)):
        if key in table:
            return table[key]
    if key in TORCH_ELEMENT_BYTES:
        return key
    raise UnknownDtype(f"unknown dtype {name!r}: bytes per element not known")


def element_bytes(name: str) -> int:
    """torch's element size of the tensor the engine allocates for `name`.

    For a packed format this is the size of its storage unit (one uint8), not of a value:
    use `kv_vector_bytes` for the bytes a head's K or V takes.
    """
    return TORCH_ELEMENT_BYTES[storage_dtype(name)]


def is_packed(kv_dtype: str) -> bool:
    """True when a K or V vector is not head_dim x `element_bytes` (packed values, scales)."""
    key = normalize(kv_dtype)
    return key in _PACKED or key in _MLA_TOKEN_BYTES or key.startswith(_BACKEND_SIZED)


def dense_element_bytes(kv_dtype: str) -> int:
    """Bytes per K/V value of an unpacked format; raises for a packed one."""
    if is_packed(kv_dtype):
        raise UnsizedKvFormat(f"{kv_dtype!r} packs its values: no single size per element")
    return element_bytes(kv_dtype)


def kv_vector_bytes(kv_dtype: str, head_dim: int) -> int:
    """Bytes one head's K (or V) vector of `head_dim` values takes per token."""
    key = normalize(kv_dtype)
    if key in _PACKED:
        return _PACKED[key].vector_bytes(head_dim)
    if is_packed(key):
        raise UnsizedKvFormat(f"{kv_dtype!r}: the attention backend sizes its slots")
    return head_dim * element_bytes(key)


def mla_latent_bytes(kv_dtype: str, latent_dim: int) -> int:
    """Bytes one MLA layer keeps per token: the latent of `latent_dim` values, or the
    fixed-size blob of the DeepSeek sparse-MLA formats (656 bytes for fp8_ds_mla)."""
    key = normalize(kv_dtype)
    if key in _MLA_TOKEN_BYTES:
        return _MLA_TOKEN_BYTES[key]
    return latent_dim * dense_element_bytes(key)


def auto_model_dtype(config_dtype: str | None, engine_dtype: str | None = None) -> str:
    """The dtype the engine runs the model in, hence the KV dtype under "auto".

    The engine's own statement (`--dtype`, the log's `dtype=torch.bfloat16`) wins. Under
    `--dtype auto` vLLM (0.3-0.33) and SGLang take config.json's torch_dtype but downcast
    float32 to a 16-bit dtype (float16, or the platform's first choice, bfloat16): 2 bytes
    either way, reported here as float16.
    """
    if engine_dtype and not is_auto(engine_dtype):
        return MODEL_DTYPES.get(normalize(engine_dtype), normalize(engine_dtype))
    if not config_dtype:
        raise UnknownDtype("the model's dtype is not stated")
    model = storage_dtype(config_dtype)
    return "float16" if model == "float32" else model


def resolve_kv_dtype(kv_cache_dtype: str | None, model_dtype: str | None) -> str:
    """The dtype the KV cache is stored in: `--kv-cache-dtype`, where "auto" means the model's.

    Raises UnknownDtype when the cache is "auto" and the model's dtype is unknown.
    """
    if not is_auto(kv_cache_dtype):
        return normalize(str(kv_cache_dtype))
    if not model_dtype:
        raise UnknownDtype("kv_cache_dtype is auto and the model dtype is unknown")
    return normalize(model_dtype)


def fp8_shrink_factor(kv_cache_dtype: str | None) -> int | None:
    """How many times smaller an fp8 KV cache would be than this one, None if not smaller.

    "auto" counts as 16-bit: the model dtype under `--dtype auto` (see auto_model_dtype).
    A format of a byte or less per value (fp8, int8, fp4 ...) or an unknown name: None.
    """
    if is_auto(kv_cache_dtype):
        return 2
    try:
        size = dense_element_bytes(str(kv_cache_dtype))
    except ValueError:
        return None
    return size if size > 1 else None
