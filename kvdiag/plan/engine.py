"""The engine's configuration as the simulator needs it, and a changed configuration.

The baseline comes from the analysis's facts (pool blocks and block size, max_num_seqs,
the step budget; each the effective value kvdiag established, or the engine's default).
Flags (spelled as the incident's engine spells them) move it the way the engine would:
the pool is memory / (block size x bytes per token) for a byte budget, a KV dtype of half
the bytes doubles the tokens, a block size regroups the same bytes, a change of
--gpu-memory-utilization moves the pool by that share of the card.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kvdiag.domain.dtypes import UnknownDtype, UnsizedKvFormat, dense_element_bytes, is_auto
from kvdiag.domain.errors import NotPlannableError, PlanFlagError
from kvdiag.domain.records.diagnosis import Fact
from kvdiag.domain.settings import engine_settings, normalise
from kvdiag.plan.sim import Engine, StepModel

# When the facts do not say: vLLM 0.32's API-server defaults (CPU's budget: the GPU one is
# larger, and the step model is fitted to the run's own throughput anyway).
DEFAULT_MAX_NUM_SEQS = 128
DEFAULT_BUDGET = 2048
NULL_BLOCKS = 1  # vLLM holds back one block (the null block) from the usable pool
AUTO_ELEMENT_BYTES = 2  # "auto" is the model's 16-bit dtype (domain/dtypes.auto_model_dtype)


@dataclass(frozen=True, slots=True)
class Setup:
    """What sizes the pool and caps the batch, with the bytes each token takes."""

    pool_bytes: float | None
    bytes_per_token: float | None
    block_size: int
    blocks: int  # as stated (null block included)
    max_num_seqs: int
    budget: int
    max_queued: int | None
    kv_dtype: str
    card_bytes: float | None  # the card's memory, for --gpu-memory-utilization
    gpu_memory_utilization: float | None

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def engine(self, step: StepModel) -> Engine:
        return Engine(
            max(1, self.blocks - NULL_BLOCKS),
            self.block_size,
            self.max_num_seqs,
            self.budget,
            step,
            self.max_queued,
        )


def _value(facts: Mapping[str, Fact | tuple[Fact, ...]], name: str) -> object:
    fact = facts.get(name)
    if isinstance(fact, tuple):
        fact = fact[0] if fact else None
    return fact.value if fact is not None else None


def baseline_setup(
    facts: Mapping[str, Fact | tuple[Fact, ...]], settings: Mapping[str, str]
) -> Setup:
    """The incident's configuration. Raises NotPlannableError when its pool is unknown."""
    blocks, block_size = _value(facts, "pool_blocks"), _value(facts, "block_size")
    tokens = _value(facts, "pool_tokens")
    if not isinstance(block_size, int):
        raise NotPlannableError(
            "the KV block size is not in the evidence: the pool cannot be replayed"
        )
    if not isinstance(blocks, int):
        if not isinstance(tokens, int):
            raise NotPlannableError(
                "the KV pool's size is not in the evidence: nothing to replay against"
            )
        blocks = tokens // block_size
    pool_bytes = _value(facts, "pool_bytes")
    per_token = _value(facts, "kv_bytes_per_token")
    queued = settings.get("max_num_queued_reqs")
    return Setup(
        float(pool_bytes) if isinstance(pool_bytes, int | float) else None,
        float(per_token) if isinstance(per_token, int | float) else None,
        block_size,
        blocks,
        _int(_value(facts, "max_num_seqs"), DEFAULT_MAX_NUM_SEQS),
        _int(_value(facts, "max_num_batched_tokens"), DEFAULT_BUDGET),
        int(queued) if queued and queued.isdigit() else None,
        str(_value(facts, "kv_cache_dtype") or "auto"),
        _card_bytes(facts),
        _float(_value(facts, "gpu_memory_utilization")),
    )


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _card_bytes(facts: Mapping[str, Fact | tuple[Fact, ...]]) -> float | None:
    mib = _value(facts, "gpu_memory_total_mib")
    return float(mib) * 2**20 if isinstance(mib, int | float) else None


def parse_flags(words: tuple[str, ...], engine: str) -> dict[str, str]:
    """`--kv-cache-memory-bytes 102M --max-num-seqs 32` -> canonical key: value as the
    config table states it. Raises PlanFlagError for a flag the engine does not take."""
    table = engine_settings().get(engine)
    if table is None:
        raise PlanFlagError(f"kvdiag knows no flags of engine {engine!r}")
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        spec = table.by_flag(name) if name.startswith("-") else None
        if spec is None:
            raise PlanFlagError(f"{word}: not a flag of {engine} that kvdiag can plan with")
        if eq:
            value = inline
        elif spec.is_switch:
            value = "True"
        else:
            if i + 1 >= len(words):
                raise PlanFlagError(f"{word}: needs a value")
            i += 1
            value = words[i]
        out[spec.key] = normalise(spec, value)
        i += 1
    return out


# What the scheduler model uses; prefix caching is applied to the traffic (run.py).
MODELLED = frozenset(
    {
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_num_queued_reqs",
        "kv_cache_memory_bytes",
        "gpu_memory_utilization",
        "kv_cache_dtype",
        "block_size",
        "enable_chunked_prefill",
        "enable_prefix_caching",
    }
)


def apply(base: Setup, changes: Mapping[str, str]) -> Setup:
    """The configuration after the changes, the pool resized as the engine would. Raises
    PlanFlagError for a setting the model does not use (it would be silently ignored)."""
    unused = sorted(set(changes) - MODELLED)
    if unused:
        raise PlanFlagError(
            f"kvdiag's scheduler model does not use {', '.join(unused)}: a plan with it "
            "would silently ignore the change"
        )
    setup = base
    chunk = changes.get("enable_chunked_prefill", "")
    if chunk.isdigit():  # SGLang's --chunked-prefill-size: its per-step prefill budget
        setup = replace(setup, budget=int(chunk))
    if "max_num_seqs" in changes:
        setup = replace(setup, max_num_seqs=int(changes["max_num_seqs"]))
    if "max_num_batched_tokens" in changes:
        setup = replace(setup, budget=int(changes["max_num_batched_tokens"]))
    if "max_num_queued_reqs" in changes:
        setup = replace(setup, max_queued=int(changes["max_num_queued_reqs"]))
    pool_bytes, per_token = setup.pool_bytes, setup.bytes_per_token
    if "kv_cache_memory_bytes" in changes:
        pool_bytes = float(changes["kv_cache_memory_bytes"])
    if "gpu_memory_utilization" in changes:
        pool_bytes = _utilization_pool(setup, float(changes["gpu_memory_utilization"]))
    if "kv_cache_dtype" in changes:
        per_token = _dtype_bytes(setup, changes["kv_cache_dtype"])
        setup = replace(setup, kv_dtype=changes["kv_cache_dtype"])
    block_size = int(changes.get("block_size", setup.block_size))
    if (pool_bytes, per_token, block_size) != (
        setup.pool_bytes,
        setup.bytes_per_token,
        setup.block_size,
    ):
        if pool_bytes is None or per_token is None:
            raise NotPlannableError(
                "the pool's bytes or the bytes per token are not in the evidence: "
                "the pool cannot be resized"
            )
        blocks = int(pool_bytes // (block_size * per_token))
        setup = replace(
            setup,
            pool_bytes=pool_bytes,
            bytes_per_token=per_token,
            block_size=block_size,
            blocks=blocks,
        )
    return setup


def _utilization_pool(setup: Setup, utilization: float) -> float:
    if setup.card_bytes is None or setup.gpu_memory_utilization is None or setup.pool_bytes is None:
        raise NotPlannableError(
            "--gpu-memory-utilization needs the card's memory and the pool's bytes"
        )
    return setup.pool_bytes + (utilization - setup.gpu_memory_utilization) * setup.card_bytes


def _element_bytes(kv_dtype: str) -> int:
    if is_auto(kv_dtype):
        return AUTO_ELEMENT_BYTES
    try:
        return dense_element_bytes(kv_dtype)
    except (UnknownDtype, UnsizedKvFormat) as exc:
        raise PlanFlagError(f"--kv-cache-dtype {kv_dtype}: {exc}") from None


def _dtype_bytes(setup: Setup, dtype: str) -> float | None:
    """Bytes per token after a KV dtype change: scaled by the element sizes."""
    if setup.bytes_per_token is None:
        return None
    return setup.bytes_per_token * _element_bytes(dtype) / _element_bytes(setup.kv_dtype)
