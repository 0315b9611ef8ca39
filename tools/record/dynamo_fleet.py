"""Assemble a Dynamo fleet fixture from real vLLM recordings (issue 32).

    python tools/record/dynamo_fleet.py fixtures/NAME WORKER_ID=RECORDING_DIR ...

Each RECORDING_DIR is a recorded vLLM server (server.log, launch.txt, metrics/<ts>.prom). Each
worker folder incident/WORKER_ID gets the real log and launch record and every third real
scrape, with the two gauges a Dynamo 1.x vLLM worker adds on its system port appended in
Dynamo's exact form (ai-dynamo 1.6.1 dynamo/common/utils/prometheus.py LLMBackendMetrics:
names, HELP text, labels model, dynamo_component, dp_rank), valued from the same scrape
(num_gpu_blocks; vllm:kv_cache_usage_perc, which Dynamo's vLLM publisher passes on).
incident/frontend/metrics/ gets, at the first worker's scrape times, the frontend's model card
gauges and the KV router's per-worker active decode blocks (lib/llm/src/http/service/metrics.rs,
lib/llm/src/kv_router/metrics.rs), each worker's blocks from its nearest scrape.
"""
import re
import shutil
import sys
from pathlib import Path

USAGE = re.compile(r'^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$', re.M)
BLOCKS = re.compile(r'num_gpu_blocks="(\d+)"')

def kvstats(text: str, total: int) -> tuple[str, float]:
    usage = float(USAGE.search(text).group(1))
    lab = 'model="/opt/tinymodel",dynamo_component="backend",dp_rank="0"'
    return (
        "# HELP dynamo_component_total_blocks Total number of KV cache blocks available on the worker.\n"
        "# TYPE dynamo_component_total_blocks gauge\n"
        f"dynamo_component_total_blocks{{{lab}}} {float(total)}\n"
        "# HELP dynamo_component_gpu_cache_usage_percent GPU cache usage as a percentage (0.0-1.0).\n"
        "# TYPE dynamo_component_gpu_cache_usage_percent gauge\n"
        f"dynamo_component_gpu_cache_usage_percent{{{lab}}} {usage}\n"
    ), usage

def main(dest: Path, workers: list[tuple[str, Path]]) -> None:
    inc = dest / "incident"
    if inc.exists():
        shutil.rmtree(inc)
    series: dict[str, list[tuple[float, int]]] = {}
    total = 0
    for wid, src in workers:
        w = inc / wid
        (w / "metrics").mkdir(parents=True)
        shutil.copy(src / "server.log", w / "server.log")
        shutil.copy(src / "launch.txt", w / "launch.txt")
        pts = []
        for f in sorted((src / "metrics").glob("*.prom"))[::3]:
            text = f.read_text()
            total = int(BLOCKS.search(text).group(1))
            extra, usage = kvstats(text, total)
            # Dynamo's worker system port serves its own gauges after the engine's
            (w / "metrics" / f.name).write_text(text.rstrip("\n") + "\n" + extra)
            pts.append((float(f.stem), round(usage * (total - 1))))
        series[wid] = pts
    fe = inc / "frontend" / "metrics"
    fe.mkdir(parents=True)
    first = workers[0][0]
    for ts, _ in series[first]:
        lines = [
            "# HELP dynamo_frontend_model_total_kv_blocks Total KV cache blocks available for a worker serving the model",
            "# TYPE dynamo_frontend_model_total_kv_blocks gauge",
            f'dynamo_frontend_model_total_kv_blocks{{model="/opt/tinymodel"}} {total}',
            "# HELP dynamo_frontend_model_kv_cache_block_size KV cache block size in tokens for a worker serving the model",
            "# TYPE dynamo_frontend_model_kv_cache_block_size gauge",
            'dynamo_frontend_model_kv_cache_block_size{model="/opt/tinymodel"} 128',
            "# HELP dynamo_frontend_model_context_length Maximum context length in tokens for a worker serving the model",
            "# TYPE dynamo_frontend_model_context_length gauge",
            'dynamo_frontend_model_context_length{model="/opt/tinymodel"} 4096',
            "# HELP dynamo_frontend_worker_active_decode_blocks Active KV cache decode blocks per worker",
            "# TYPE dynamo_frontend_worker_active_decode_blocks gauge",
        ]
        for wid, pts in sorted(series.items()):
            near = min(pts, key=lambda p: abs(p[0] - ts))
            lines.append(
                f'dynamo_frontend_worker_active_decode_blocks{{dp_rank="0",worker_id="{wid}",worker_type="decode"}} {near[1]}'
            )
        (fe / f"{ts:.3f}.prom").write_text("\n".join(lines) + "\n")

if __name__ == "__main__":
    dest = Path(sys.argv[1])
    pairs = [(a.split("=")[0], Path(a.split("=")[1])) for a in sys.argv[2:]]
    main(dest, pairs)
