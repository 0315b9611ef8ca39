"""vLLM's KV offload tier and external prefix cache (issue 32): the facts and KV203."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import FIXTURES
from tests.test_vllm_log import ingest, rows

NO_HITS = FIXTURES / "vllm-offload-stores-no-hits" / "incident"
HITS = FIXTURES / "vllm-offload-hits-near-miss" / "incident"
M = 'engine="0",model_name="m"'


def _run(incident: Path) -> Any:
    return analyze(AnalyzeOptions(incident=incident)).diagnosis


def _facts(diagnosis: Any) -> dict[str, Any]:
    return {k: v.value for k, v in diagnosis.facts.items() if hasattr(v, "value")}


def test_facts_state_what_the_tier_stored_served_and_holds() -> None:
    facts = _facts(_run(NO_HITS))
    assert facts["offload_stored_bytes"] == 4 * 480 * 1024**2
    assert facts["offload_loaded_bytes"] == 0
    assert facts["external_prefix_hits"] == 0
    assert facts["external_prefix_queries"] == 4 * 120 * 1800
    assert facts["external_prefix_hit_rate"] == 0.0
    assert facts["offload_tier_bytes"] == 32 * 1024**3
    assert facts["offload_tier_tokens"] == 262_144


def test_a_tier_that_stores_and_never_hits_is_a_finding_with_its_numbers() -> None:
    diagnosis = _run(NO_HITS)
    (kv203,) = [f for f in diagnosis.findings if f.code == "KV203"]
    assert "stored 1.88 GiB of a 32.00 GiB CPU tier" in kv203.title
    assert "0.0% of 864,000 prompt tokens" in kv203.title
    assert {e.path for e in kv203.evidence} == {"metrics/1773136820.000.prom"}
    assert any("kv_offloading_size" in r.action for r in kv203.remediation)
    assert diagnosis.verdict.primary.value == "healthy"  # a cost, not an incident class


def test_a_tier_that_hits_is_not_a_finding() -> None:
    diagnosis = _run(HITS)
    assert not [f for f in diagnosis.findings if f.code == "KV203"]
    assert _facts(diagnosis)["external_prefix_hit_rate"] == 0.42


def _scrape(store: float, load: float) -> str:
    return (
        "# TYPE vllm:kv_offload_total_bytes_total counter\n"
        f'vllm:kv_offload_total_bytes_total{{{M},transfer_type="CPU_to_GPU"}} {load}\n'
        f'vllm:kv_offload_total_bytes_total{{{M},transfer_type="GPU_to_CPU"}} {store}\n'
    )


@pytest.mark.parametrize(("load", "fires"), [(0.0, True), (5e8, False)])
def test_before_0_33_the_transfer_type_label_tells_stores_from_loads(
    tmp_path: Path, load: float, fires: bool
) -> None:
    # 0.19.1-0.22.1 export only kv_offload_total_bytes{transfer_type}; no external counters.
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "1773136800.000.prom").write_text(_scrape(0.0, 0.0))
    (tmp_path / "metrics" / "1773136805.000.prom").write_text(_scrape(1e9, load))
    diagnosis = _run(tmp_path)
    facts = _facts(diagnosis)
    assert facts["offload_stored_bytes"] == 1_000_000_000
    assert facts["offload_loaded_bytes"] == int(load)
    found = [f for f in diagnosis.findings if f.code == "KV203"]
    assert bool(found) is fires
    if fires:
        assert "loaded back 0.0% of that" in found[0].title


def test_no_connector_makes_no_offload_facts() -> None:
    # vLLM 0.32 exports the external counters at zero without a connector.
    facts = _facts(_run(FIXTURES / "vllm-a-healthy" / "incident"))
    assert not [k for k in facts if k.startswith(("offload_", "external_prefix"))]


def test_stats_line_external_prefix_hit_rate(tmp_path: Path) -> None:
    # vllm-project/vllm#31695 (SharedStorageConnector, v1 engine), as pasted.
    line = (
        "INFO 01-05 10:00:00 [loggers.py:248] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 5.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 0.0%, Prefix cache hit rate: 0.0%, External prefix cache hit rate: 0.0%"
    )
    path = tmp_path / "server.log"
    path.write_text(line + "\n")
    tables, _ = ingest(path)
    (row,) = rows(tables, "log_stats").iter_rows(named=True)
    assert row["external_prefix_hit_pct"] == 0.0 and row["prefix_hit_pct"] == 0.0
