"""NVIDIA Dynamo fleets (issue 32): which replica a Dynamo series is about, and the fleet's
engine. The exposition lines are Dynamo's own (lib/llm/src/kv_router/metrics.rs tests, the
paste of ai-dynamo/dynamo#2704)."""

from __future__ import annotations

from pathlib import Path

from tests.metric_support import ingest, write

# The frontend's router view of two workers, and the model card gauges (label `model`).
FRONTEND = """\
# HELP dynamo_frontend_worker_active_decode_blocks Active KV cache decode blocks per worker
# TYPE dynamo_frontend_worker_active_decode_blocks gauge
dynamo_frontend_worker_active_decode_blocks{dp_rank="0",worker_id="123",worker_type="decode"} 42
dynamo_frontend_worker_active_decode_blocks{dp_rank="0",worker_id="456",worker_type="decode"} 3
# HELP dynamo_frontend_model_total_kv_blocks Total KV cache blocks available for a worker serving the model
# TYPE dynamo_frontend_model_total_kv_blocks gauge
dynamo_frontend_model_total_kv_blocks{model="Qwen/Qwen3-0.6B"} 12894
"""
# A worker's own scrape: kvstats carry no worker label, the folder names the worker.
WORKER = """\
# HELP dynamo_component_kvstats_gpu_cache_usage_percent GPU cache usage as a percentage (0.0-1.0)
# TYPE dynamo_component_kvstats_gpu_cache_usage_percent gauge
dynamo_component_kvstats_gpu_cache_usage_percent{dynamo_component="backend",dynamo_namespace="dynamo"} 0.5
"""


def test_worker_id_names_the_replica_of_a_frontend_series(tmp_path: Path) -> None:
    write(tmp_path, "frontend/metrics.prom", FRONTEND)
    rows = ingest(tmp_path).table("metric_samples")
    by_metric = {
        (r["metric"], r["replica"]): r["value"] for r in rows.iter_rows(named=True)
    }
    assert by_metric[("router_active_decode_blocks", "123")] == 42
    assert by_metric[("router_active_decode_blocks", "456")] == 3
    # a series about no worker stays with the folder it was saved in
    assert by_metric[("kv_total_blocks", "frontend")] == 12894


def test_worker_kvstats_belong_to_the_worker_folder(tmp_path: Path) -> None:
    write(tmp_path, "worker-a/metrics.prom", WORKER)
    write(tmp_path, "worker-b/metrics.prom", WORKER.replace("0.5", "0.9"))
    rows = ingest(tmp_path).table("metric_samples")
    got = {r["replica"]: r["value"] for r in rows.iter_rows(named=True)}
    assert set(rows["metric"]) == {"kv_cache_usage"}
    assert got == {"worker-a": 0.5, "worker-b": 0.9}
