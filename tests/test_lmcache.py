"""LMCache inside vLLM (issue 32): its lines in vLLM's log, its counters, KV203 in its words."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import FIXTURES
from tests.metric_support import ingest, write

NO_HITS = FIXTURES / "vllm-lmcache-stores-no-hits" / "incident"
HITS = FIXTURES / "vllm-lmcache-hits-near-miss" / "incident"


def _run(incident: Path) -> Any:
    return analyze(AnalyzeOptions(incident=incident)).diagnosis


def _facts(diagnosis: Any) -> dict[str, Any]:
    return {k: v.value for k, v in diagnosis.facts.items() if hasattr(v, "value")}


def _log_sums(log: Path, first_ts: str) -> tuple[int, int, int]:
    """Stored, looked-up and hit tokens of LMCache's lines at or after `first_ts`, read
    with plain regexes (independently of the pack)."""
    stored = looked = hit = 0
    for line in log.read_text().splitlines():
        stamp = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\] LMCache", line)
        if stamp is None or stamp.group(1) < first_ts:
            continue
        if m := re.search(r"Stored (\d+) out of total", line):
            stored += int(m.group(1))
        if m := re.search(r"Total tokens (\d+), LMCache hit tokens: (\d+)", line):
            looked += int(m.group(1))
            hit += int(m.group(2))
    return stored, looked, hit


def test_a_vllm_log_with_lmcache_lines_is_one_vllm_log_fully_parsed() -> None:
    got = ingest(NO_HITS)
    assert got.kinds["server.log"] == "vllm_log"
    rows = got.table("log_kv_connector")
    lines = NO_HITS.joinpath("server.log").read_text().splitlines()
    assert rows.height == sum(" LMCache INFO: " in line for line in lines)
    assert set(rows["event"]) == {"config", "lookup", "store_start", "stored"}
    assert rows["level"].unique().to_list() == ["INFO"]
    assert rows["ts"].null_count() == 0  # LMCache's own date stamps the line


def test_metrics_and_log_agree_on_what_lmcache_stored_and_found() -> None:
    facts = _facts(_run(NO_HITS))
    # The counters' increase covers the requests after the first scrape (06:10:00).
    stored, looked, hit = _log_sums(NO_HITS / "server.log", "2025-10-08 06:10:00")
    assert facts["lmcache_stored_tokens"] == stored
    assert facts["lmcache_lookup_tokens"] == looked
    assert facts["lmcache_hit_tokens"] == hit == 0
    assert facts["lmcache_hit_rate"] == 0.0


def test_the_log_alone_is_enough_for_kv203(tmp_path: Path) -> None:
    """A pasted vLLM log with LMCache's lines and no scrape: the same finding, on its lines."""
    shutil.copy(NO_HITS / "server.log", tmp_path / "server.log")
    diagnosis = _run(tmp_path)
    (kv203,) = [f for f in diagnosis.findings if f.code == "KV203"]
    stored, _, _ = _log_sums(tmp_path / "server.log", "0000")
    assert kv203.title.startswith(f"LMCache stored {stored:,} tokens")
    assert {e.path for e in kv203.evidence} == {"server.log"}
    only_log = tmp_path / "plain"
    only_log.mkdir()
    plain = [ln for ln in (NO_HITS / "server.log").read_text().splitlines() if "LMCache" not in ln]
    (only_log / "server.log").write_text("\n".join(plain) + "\n")
    skipped = {r.code: r.reason for r in _run(only_log).rules if r.status == "skipped"}
    assert "log_kv_connector" in skipped["KV203"]  # nothing to judge: says which tables


def test_lmcache_that_stores_and_never_hits_is_named_by_kv203() -> None:
    diagnosis = _run(NO_HITS)
    (kv203,) = [f for f in diagnosis.findings if f.code == "KV203"]
    assert kv203.title.startswith("LMCache stored ")
    assert "0.0% of " in kv203.title
    paths = {e.path for e in kv203.evidence}
    assert "server.log" in paths  # its own line, beside its counters
    assert any(p.startswith("metrics/") for p in paths)
    assert any("LMCache" in r.action for r in kv203.remediation)
    assert diagnosis.verdict.primary.value == "healthy"


def test_lmcache_that_hits_is_not_a_finding() -> None:
    diagnosis = _run(HITS)
    assert not [f for f in diagnosis.findings if f.code == "KV203"]
    stored, looked, hit = _log_sums(HITS / "server.log", "2025-10-08 06:10:00")
    facts = _facts(diagnosis)
    assert facts["lmcache_hit_rate"] == round(hit / looked, 4)
    assert facts["lmcache_stored_tokens"] == stored < looked


def test_the_log_alone_gives_lmcache_facts(tmp_path: Path) -> None:
    shutil.copy(NO_HITS / "server.log", tmp_path / "server.log")
    facts = _facts(_run(tmp_path))
    stored, looked, _ = _log_sums(tmp_path / "server.log", "0000")
    assert facts["lmcache_stored_tokens"] == stored
    assert facts["lmcache_lookup_tokens"] == looked
    assert facts["lmcache_hit_rate"] == 0.0


def _mp_scrape(requested: float, hit: float, stores: float) -> str:
    # LMCache's multi-process server: OpenTelemetry counters through its Prometheus exporter
    return (
        "# TYPE lmcache_mp_lookup_requested_tokens_total counter\n"
        f'lmcache_mp_lookup_requested_tokens_total{{cache_salt="",model_name="m"}} {requested}\n'
        "# TYPE lmcache_mp_lookup_hit_tokens_total counter\n"
        f'lmcache_mp_lookup_hit_tokens_total{{cache_salt="",model_name="m"}} {hit}\n'
        "# TYPE lmcache_mp_num_finished_stores_total counter\n"
        f"lmcache_mp_num_finished_stores_total {stores}\n"
    )


def test_multi_process_lmcache_is_judged_on_its_lookup_counters(tmp_path: Path) -> None:
    write(tmp_path, "metrics/1759903800.000.prom", _mp_scrape(0, 0, 0))
    write(tmp_path, "metrics/1759903815.000.prom", _mp_scrape(400_000, 0, 64))
    diagnosis = _run(tmp_path)
    facts = _facts(diagnosis)
    assert facts["lmcache_lookup_tokens"] == 400_000
    assert "lmcache_stored_tokens" not in facts  # it counts stores, not tokens
    (kv203,) = [f for f in diagnosis.findings if f.code == "KV203"]
    assert kv203.title.startswith("LMCache completed 64 stores")


def test_multi_process_lmcache_that_hits_is_not_a_finding(tmp_path: Path) -> None:
    write(tmp_path, "metrics/1759903800.000.prom", _mp_scrape(0, 0, 0))
    write(tmp_path, "metrics/1759903815.000.prom", _mp_scrape(400_000, 120_000, 64))
    diagnosis = _run(tmp_path)
    assert _facts(diagnosis)["lmcache_hit_rate"] == 0.3
    assert not [f for f in diagnosis.findings if f.code == "KV203"]


def test_layer_1_shows_lmcache_cpu_cache_beside_the_gpu_kv_memory() -> None:
    text = NO_HITS.joinpath("server.log").read_text()
    cpu = float(re.findall(r"'max_local_cpu_size': ([\d.]+)", text)[0])
    gpu = float(re.findall(r"Available KV cache memory: ([\d.]+) GiB", text)[0])
    diagnosis = _run(NO_HITS)
    (layer1,) = [layer for layer in diagnosis.reconciliation if layer.layer == 1]
    rows = {c.quantity: c for c in layer1.comparisons}
    beside = rows["LMCache local CPU cache vs the GPU KV memory (per GPU)"]
    assert (beside.expected, beside.observed) == (gpu, cpu)
    held = rows["LMCache local CPU cache held at its peak"]
    assert held.expected == cpu and 0 < held.observed <= cpu
    assert {s.path for s in held.sources} == {"server.log", "metrics/1759903860.000.prom"}


def test_a_lookup_still_running_is_not_counted_twice(tmp_path: Path) -> None:
    # vLLM's vendored adapter prints 'hit tokens: None.' and looks the request up again
    head = "(EngineCore_DP0 pid=286) {} 10-08 06:10:0{} [vllm_v1_adapter.py:{}] Reqid: r1, "
    write(
        tmp_path,
        "server.log",
        head.format("DEBUG", 1, 1210)
        + "Total tokens 20000, LMCache hit tokens: None.\n"
        + head.format("INFO", 2, 1227)
        + "Total tokens 20000, LMCache hit tokens: 0, need to load: 0\n",
    )
    facts = _facts(_run(tmp_path))
    assert facts["lmcache_lookup_tokens"] == 20_000
