"""Layer 1's pool and the facts' bytes per token come from one computation (domain/kvmath).

The A100 case study's own log, with the start-up memory profile cut (as a truncated log
would have it): layer 1 must then price the pool from its tokens, and with the bytes per
token the facts (and so KV101 and the peak remedies) use, whatever the KV dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdiag.analyzer import model as facts
from kvdiag.analyzer.ingest.base import IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.card import card
from kvdiag.analyzer.store.database import Store
from kvdiag.domain.units import GIB, KIB
from kvdiag.rules.base import RuleContext
from kvdiag.rules.kv102_shrunken_pool import ShrunkenPool
from tests.conftest import FIXTURES
from tests.ingest_helpers import kind_of

CASE = FIXTURES / "gpu-shrunken-pool-a100-case-study" / "incident"
PROFILE = "worker.py:241] the current vLLM instance", "worker.py:241] model weights take"
POOL_TOKENS = 2145 * 16  # "# GPU blocks: 2145" at vLLM 0.6.6's default block size


def _incident(
    tmp_path: Path, kv_cache_dtype: str, engine_dtype: str = "float16", config_dtype: str = ""
) -> Path:
    """The case study without its memory profile, its engine line set to `kv_cache_dtype`
    and `engine_dtype`, its config.json's torch_dtype to `config_dtype` when given."""
    lines = (CASE / "vllm.log").read_text().splitlines(keepends=True)
    kept = [line for line in lines if not any(cut in line for cut in PROFILE)]
    assert len(kept) == len(lines) - 2
    log = "".join(kept).replace("kv_cache_dtype=auto,", f"kv_cache_dtype={kv_cache_dtype},", 1)
    log = log.replace("dtype=torch.float16,", f"dtype=torch.{engine_dtype},", 1)
    (tmp_path / "vllm.log").write_text(log)
    config = (CASE / "config.json").read_text()
    if config_dtype:
        config = config.replace('"torch_dtype": "float16"', f'"torch_dtype": "{config_dtype}"')
    (tmp_path / "config.json").write_text(config)
    return tmp_path


def _context(incident: Path) -> Iterator[RuleContext]:
    store = Store()
    for path in sorted(p for p in incident.iterdir() if p.is_file()):
        if (kind := kind_of(path)) is None:
            continue
        unit = InputUnit(kind, path.name, (path,), (path.name,), path.stat().st_size, "")
        ingest = IngestContext(path.parent, None, None, None)
        for emit in INGESTERS_BY_KIND[kind]().ingest(unit, ingest):
            if isinstance(emit, TableBatch):
                store.append(emit.table, emit.frame, emit.series)
    store.flush()
    try:
        yield RuleContext(ShrunkenPool(), Incident(store.reader, facts.establish(store.reader)), {})
    finally:
        store.discard()


# Llama-2-7B: 2 x 32 layers x 32 heads x 128 x bytes; fp8_inc is float8_e4m3fn (1 byte) and
# fp8_e5m2 uint8 in vLLM's STR_DTYPE_TO_TORCH_DTYPE, "auto" the model's float16.
@pytest.mark.parametrize(
    ("kv_cache_dtype", "per_token"),
    [("auto", 512 * KIB), ("fp8_inc", 256 * KIB), ("fp8_e5m2", 256 * KIB)],
)
def test_layer_1_prices_the_pool_with_the_facts_bytes_per_token(
    tmp_path: Path, kv_cache_dtype: str, per_token: int
) -> None:
    for ctx in _context(_incident(tmp_path, kv_cache_dtype)):
        fact = ctx.fact("kv_bytes_per_token")
        assert fact is not None and fact.value == per_token
        assert ctx.fact_value("pool_tokens") == POOL_TOKENS
        found = card(ctx, None)
        assert found.pool_gib is not None
        assert found.pool_gib * GIB == POOL_TOKENS * per_token
        assert found.pool_how.endswith("bytes per token (config.json)")


def test_at_the_models_dtype_the_priced_pool_is_the_one_the_engine_printed(
    tmp_path: Path,
) -> None:
    # The cut profile line said "the rest of the memory reserved for KV Cache is 16.76GiB".
    for ctx in _context(_incident(tmp_path, "auto")):
        found = card(ctx, None)
        assert found.pool_gib == pytest.approx(16.76, abs=0.005)


# vLLM's --dtype auto runs a float32 checkpoint in 16 bits (0.6.6 vllm/config.py:2224), so an
# "auto" KV cache is 2 bytes a value; the engine's own dtype line, when it states one, wins.
@pytest.mark.parametrize(
    ("engine_dtype", "per_token"), [("float16", 512 * KIB), ("float32", 1024 * KIB)]
)
def test_auto_follows_the_dtype_the_engine_ran_a_float32_checkpoint_in(
    tmp_path: Path, engine_dtype: str, per_token: int
) -> None:
    incident = _incident(tmp_path, "auto", engine_dtype, config_dtype="float32")
    for ctx in _context(incident):
        assert ctx.fact_value("kv_bytes_per_token") == per_token
        found = card(ctx, None)
        assert found.pool_gib is not None and found.pool_gib * GIB == POOL_TOKENS * per_token
