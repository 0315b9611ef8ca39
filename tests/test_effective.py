"""Effective settings: the best source wins, else the version's documented default."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from kvdiag.analyzer.model.effective import (
    EngineContext,
    default_value,
    effective_value,
    version_key,
)
from tests.conftest import FIXTURES, analyze_json, shared
from tests.test_nvidia_smi import TABLE_535


def _row(key: str, value: str, origin: str, line: int = 1) -> dict[str, Any]:
    return {"key": key, "value": value, "origin": origin, "source_path": "x", "source_line": line}


def _default(key: str, **ctx: Any) -> str | None:
    found = default_value(key, EngineContext(**ctx))
    return found.value if found else None


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.6.4.post1", "0.9"), ("0.19.1", "0.9"), ("0.20.0", "0.92"), ("0.20.2rc1", "0.92")],
)
def test_gpu_memory_utilization_default_changes_at_0_20(version: str, expected: str) -> None:
    found = default_value("gpu_memory_utilization", EngineContext(version=version))
    assert found is not None and found.value == expected
    assert found.source == f"default for vLLM {version}" and found.is_default


def test_block_size_default_depends_on_the_backend() -> None:
    assert _default("block_size", version="0.32.0", device="cpu") == "128"
    assert _default("block_size", version="0.32.0", device="cuda") == "16"
    assert _default("block_size", version="0.5.5") == "16"
    assert _default("block_size", version="0.32.0") is None  # device unknown: no guess


def test_prefix_caching_default_by_engine_generation() -> None:
    assert _default("enable_prefix_caching", version="0.6.3") == "False"
    assert _default("enable_prefix_caching", version="0.8.0") == "True"


def test_max_num_seqs_defaults_need_the_hardware_they_depend_on() -> None:
    h100 = {"device": "cuda", "gpu_total_gib": 79.6, "gpu_name": "NVIDIA H100 80GB HBM3"}
    a100 = {"device": "cuda", "gpu_total_gib": 80.0, "gpu_name": "NVIDIA A100-SXM4-80GB"}
    small = {"device": "cuda", "gpu_total_gib": 24.0, "gpu_name": "NVIDIA GeForce RTX 3090"}
    assert _default("max_num_seqs", version="0.5.0") == "256"
    assert _default("max_num_seqs", version="0.15.1", **h100) == "1024"
    assert _default("max_num_seqs", version="0.15.1", **a100) == "256"
    assert _default("max_num_seqs", version="0.15.1", **small) == "256"
    assert _default("max_num_seqs", version="0.15.1", device="cuda") is None
    assert _default("max_num_seqs", version="0.32.0", device="cpu") is None
    assert _default("max_num_batched_tokens", version="0.15.1", **h100) == "8192"
    assert _default("max_num_batched_tokens", version="0.15.1", **small) == "2048"


def test_sglang_mem_fraction_static_by_tp_size() -> None:
    assert _default("mem_fraction_static", engine="sglang", version="0.3.6", tp=1) == "0.88"
    assert _default("mem_fraction_static", engine="sglang", version="0.3.6", tp=8) == "0.83"
    assert _default("mem_fraction_static", engine="sglang", version="0.4.10", tp=8) is None


def test_the_running_engine_outranks_the_command_line() -> None:
    rows = [
        _row("gpu_memory_utilization", "0.95", "cmdline"),
        _row("gpu_memory_utilization", "0.9", "metrics", line=554),
    ]
    found = effective_value("gpu_memory_utilization", rows, EngineContext(version="0.32.0"))
    assert found is not None and (found.value, found.source) == ("0.9", "metrics")
    cmdline_only = effective_value("gpu_memory_utilization", rows[:1], EngineContext())
    assert cmdline_only is not None and (cmdline_only.value, cmdline_only.source) == (
        "0.95",
        "cmdline",
    )


def test_aliases_and_unstated_values() -> None:
    rows = [
        _row("cache_dtype", "fp8_e4m3", "metrics"),
        _row("kv_cache_memory_bytes", "None", "metrics"),
    ]
    found = effective_value("kv_cache_dtype", rows, EngineContext())
    assert found is not None and found.value == "fp8_e4m3" and found.note == "stated as cache_dtype"
    assert effective_value("kv_cache_memory_bytes", rows, EngineContext()) is None


def test_version_key() -> None:
    assert version_key("v0.6.4.post1") == (0, 6, 4)
    assert version_key("0.20.2rc1") == (0, 20, 2)
    assert version_key("0.10.2+cpu") == (0, 10, 2)


def test_real_run_facts_name_their_sources_and_defaults() -> None:
    _, doc = analyze_json(FIXTURES / "vllm-c-prefill-peak-noprefix" / "incident")
    facts = doc["facts"]
    assert facts["enable_prefix_caching"]["value"] is False
    assert facts["tensor_parallel_size"]["value"] == 1
    # The engine's config line states it, which beats the version default.
    assert facts["tensor_parallel_size"]["source"] == {"path": "server.log", "line": 16}
    assert (
        "tensor_parallel_size=1"
        in (FIXTURES / "vllm-c-prefill-peak-noprefix" / "incident" / "server.log")
        .read_text()
        .splitlines()[15]
    )
    per_token = facts["kv_bytes_per_token"]
    assert per_token["value"] == 2048 and per_token["source"]["path"] == "launch.txt"
    assert per_token["note"] == (
        "computed from config.json: 2 x 4 layers x 2 kv_heads x 64 head_dim x 2 bytes (bfloat16)"
    )


def test_launch_record_alone_gives_the_pool(tmp_path: Path) -> None:
    """No log, no metrics: the pool follows from the flags, config.json and the defaults."""
    incident = tmp_path / "incident"
    incident.mkdir()
    shutil.copy(FIXTURES / "vllm-a-healthy" / "incident" / "launch.txt", incident)
    _, doc = analyze_json(incident)
    facts = doc["facts"]
    assert facts["pool_bytes"]["value"] == 2**30
    assert facts["pool_bytes"]["note"] == "VLLM_CPU_KVCACHE_SPACE=1 GiB"
    assert facts["block_size"]["value"] == 128
    assert facts["block_size"]["note"].startswith("default for vLLM 0.32.0")
    assert facts["pool_tokens"]["value"] == 524_288  # what the run's server.log printed


def test_gpu_facts_per_gpu_and_tp_from_vllm_worker_names(tmp_path: Path) -> None:
    incident = tmp_path / "incident"
    incident.mkdir()
    shutil.copy(
        shared("realdata/issues/nvsmi-8xL40S-vllm-tp8-ep-4.nvsmi.txt"), incident / "gpu.txt"
    )
    _, doc = analyze_json(incident)
    facts = doc["facts"]
    used = facts["gpu_memory_used"]
    assert [f["scope"] for f in used] == [[["gpu", str(n)]] for n in range(8)]
    assert [f["value"] for f in used] == [45397, 45249, 45249, 45241] * 2
    free = facts["gpu_memory_free"]
    assert [f["value"] for f in free] == [46068 - f["value"] for f in used]
    assert free[0]["note"] == "total - used (the source prints no free memory)"
    tp = facts["tensor_parallel_size"]
    assert tp["value"] == 8 and "Worker_TP0..TP7" in tp["note"]
    assert not any("nvidia-smi" in m["what"] for m in doc["missing_evidence"])


def test_gpu_facts_from_a_snapshot_series_without_real_data(tmp_path: Path) -> None:
    incident = tmp_path / "incident"
    incident.mkdir()
    (incident / "gpu.txt").write_text(TABLE_535)
    _, doc = analyze_json(incident)
    used = doc["facts"]["gpu_memory_used"]
    assert [(f["scope"], f["value"]) for f in used] == [
        ([["gpu", "0"]], 73514),
        ([["gpu", "1"]], 42010),
    ]
    assert {f["note"] for f in used} == {"most used of 2 snapshots"}
    assert [f["value"] for f in doc["facts"]["gpu_memory_total"]] == [81920, 81920]
    assert [f["value"] for f in doc["facts"]["gpu_memory_free"]] == [81920 - 73514, 81920 - 42010]
