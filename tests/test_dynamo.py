"""NVIDIA Dynamo fleets (issue 32): which replica a Dynamo series is about, and the fleet's
engine. The exposition lines are Dynamo's own (lib/llm/src/kv_router/metrics.rs tests, the
paste of ai-dynamo/dynamo#2704)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import FIXTURES, analyze_json
from tests.metric_support import ingest, write

IMBALANCE = FIXTURES / "dynamo-vllm-worker-imbalance" / "incident"
NEAR_MISS = FIXTURES / "dynamo-vllm-workers-balanced-near-miss" / "incident"
HOT, COLD = "7587890113224381697", "7587890113224381702"  # the fixture's worker_id folders

# The frontend's router view of two workers, and the model card gauges (label `model`).
_TOTAL_HELP = "Total KV cache blocks available for a worker serving the model"
FRONTEND = f"""\
# HELP dynamo_frontend_worker_active_decode_blocks Active KV cache decode blocks per worker
# TYPE dynamo_frontend_worker_active_decode_blocks gauge
dynamo_frontend_worker_active_decode_blocks{{dp_rank="0",worker_id="123",worker_type="decode"}} 42
dynamo_frontend_worker_active_decode_blocks{{dp_rank="0",worker_id="456",worker_type="decode"}} 3
# HELP dynamo_frontend_model_total_kv_blocks {_TOTAL_HELP}
# TYPE dynamo_frontend_model_total_kv_blocks gauge
dynamo_frontend_model_total_kv_blocks{{model="Qwen/Qwen3-0.6B"}} 12894
"""


def test_worker_id_names_the_replica_of_a_frontend_series(tmp_path: Path) -> None:
    write(tmp_path, "frontend/metrics.prom", FRONTEND)
    rows = ingest(tmp_path).table("metric_samples")
    by_metric = {(r["metric"], r["replica"]): r["value"] for r in rows.iter_rows(named=True)}
    assert by_metric[("router_active_decode_blocks", "123")] == 42
    assert by_metric[("router_active_decode_blocks", "456")] == 3
    # a series about no worker stays with its file's replica (no server log: the default)
    assert by_metric[("kv_total_blocks", "default")] == 12894


def test_worker_kvstats_belong_to_the_worker_folder() -> None:
    # each worker's own scrape carries no worker label: its folder (beside its log) names it
    rows = ingest(IMBALANCE).table("metric_samples")
    usage = rows.filter(rows["name"] == "dynamo_component_gpu_cache_usage_percent")
    assert set(usage["replica"]) == {HOT, COLD}
    # and the frontend's router view of each worker lands on that same worker
    routed = rows.filter(rows["metric"] == "router_active_decode_blocks")
    assert set(routed["replica"]) == {HOT, COLD}


def _remedies(doc: dict[str, object], code: str) -> list[str]:
    findings = doc["findings"]
    assert isinstance(findings, list)
    return [r["action"] for f in findings if f["code"] == code for r in f["remediation"]]


def test_fleet_is_dynamo_and_the_workers_stay_vllm() -> None:
    _, doc = analyze_json(IMBALANCE)
    facts = doc["facts"]
    assert facts["fleet_engine"]["value"] == "dynamo"
    assert facts["engine"]["value"] == "vllm"  # the workers' words stay vLLM's
    imbalance = [f for f in doc["findings"] if f["code"] == "KV303"]
    assert [f["replica"] for f in imbalance] == [HOT]
    assert COLD in imbalance[0]["title"]
    # the router's own count of each worker, cited from the frontend's scrape
    routed = {e["path"].split("/")[0] for e in imbalance[0]["evidence"]}
    assert "frontend" in routed
    routing = " ".join(_remedies(doc, "KV303"))
    assert "--router-mode kv" in routing and "--kv-overlap-score-weight" in routing
    # remedies about the engine itself keep the engine's flags, not the router's
    assert not any("--router" in r for r in _remedies(doc, "KV301"))


def test_a_balanced_dynamo_fleet_is_no_imbalance() -> None:
    _, doc = analyze_json(NEAR_MISS)
    assert doc["facts"]["fleet_engine"]["value"] == "dynamo"
    assert not [f for f in doc["findings"] if f["code"] == "KV303"]
    assert sorted(r["replica"] for r in doc["fleet"]) == [
        "7587890113224381711",
        "7587890113224381716",
    ]


def test_workers_scraped_without_logs_are_still_the_replicas(tmp_path: Path) -> None:
    """A fleet saved as one folder of /metrics files per worker, no server log at all: each
    worker's folder is a replica, and the frontend's folder (no load of its own) is none."""
    shutil.copytree(IMBALANCE, tmp_path / "fleet")
    for log in (tmp_path / "fleet").rglob("server.log"):
        log.unlink()
    _, doc = analyze_json(tmp_path / "fleet")
    assert doc["verdict"]["primary"] == "replica_imbalance"
    assert sorted(r["replica"] for r in doc["fleet"]) == sorted([HOT, COLD])
    assert [f["replica"] for f in doc["findings"] if f["code"] == "KV303"] == [HOT]


def test_worker_id_of_other_families_names_no_replica(tmp_path: Path) -> None:
    # LMCache labels its series worker_id = the TP rank: not a replica. Only Dynamo's
    # families are split by it (replica_labels' prefixes).
    line = 'vllm:kv_cache_usage_perc{engine="0",model_name="m",worker_id="1"} 0.5\n'
    write(tmp_path, "one/metrics.prom", "# TYPE vllm:kv_cache_usage_perc gauge\n" + line)
    rows = ingest(tmp_path).table("metric_samples")
    assert rows["replica"].to_list() == ["default"]


def test_sglang_workers_keep_sglang_words_behind_dynamo(tmp_path: Path) -> None:
    # Two SGLang workers (real logs of two fixtures) behind a Dynamo frontend: the fleet is
    # Dynamo's, the words are SGLang's, and only the routing remedy speaks of the router.
    for worker, fixture in (("w1", "sglang-saturation-queue"), ("w2", "sglang-healthy")):
        log = FIXTURES / fixture / "incident" / "sglang-server.log"
        write(tmp_path, f"{worker}/sglang-server.log", log.read_text())
    write(tmp_path, "frontend/metrics.prom", FRONTEND)
    _, doc = analyze_json(tmp_path)
    assert doc["facts"]["engine"]["value"] == "sglang"
    assert doc["facts"]["fleet_engine"]["value"] == "dynamo"
    assert [f["replica"] for f in doc["findings"] if f["code"] == "KV303"] == ["w1"]
    assert "--router-mode kv" in " ".join(_remedies(doc, "KV303"))
    saturation = [f["title"] for f in doc["findings"] if f["code"] == "KV301"]
    assert saturation and "retractions" in saturation[0]  # SGLang's word for preemptions
