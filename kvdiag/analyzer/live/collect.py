"""Collect an incident bundle from a running server: timed /metrics scrapes, nvidia-smi
snapshots, what the server says about itself, and a manifest.

The folder it writes is exactly what `kvdiag analyze` reads: `metrics/<unix_ts>.prom`
(one body per scrape, byte for byte) with `metrics/scrapes.jsonl` logging every attempt,
`nvidia-smi/<unix_ts>.csv` and `.apps.csv`, `server/version.json` and `server/models.json`,
and `manifest.json`. Each file is written whole (temp file, then rename), so an interrupt
keeps everything collected so far and nothing half-written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdiag import __version__
from kvdiag.analyzer.atomic import write_atomic

GPU_QUERY = "index,uuid,name,memory.total,memory.used,memory.free,memory.reserved,utilization.gpu"
APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"


@dataclass(frozen=True, slots=True)
class CollectPlan:
    url: str  # server base URL, e.g. http://127.0.0.1:8000
    out: Path
    duration_s: float
    interval_s: float
    token: str | None = None  # bearer token (from the environment or a file, never argv)
    timeout_s: float = 10.0
    nvidia_smi: str | None = field(default_factory=lambda: shutil.which("nvidia-smi"))


@dataclass
class CollectResult:
    scrapes_ok: int = 0
    scrapes_failed: int = 0
    gpu_snapshots: int = 0
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)
    last_ts: float = 0.0  # the previous scrape's time, as its file name rounds it


def _get(plan: CollectPlan, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(plan.url.rstrip("/") + path)
    if plan.token:
        request.add_header("Authorization", f"Bearer {plan.token}")
    with urllib.request.urlopen(request, timeout=plan.timeout_s) as response:
        return int(response.status), response.read()


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def scrape_once(plan: CollectPlan, result: CollectResult) -> None:
    """One GET /metrics: the body to metrics/<ts>.prom, the attempt to scrapes.jsonl."""
    # Scrapes that catch up after a stall can start within one millisecond; the file name
    # is the time to the millisecond, so each scrape gets a later one than the last.
    ts = max(round(time.time(), 3), round(result.last_ts + 0.001, 3))
    result.last_ts = ts
    row: dict[str, Any] = {
        "ts": round(ts, 3),
        "file": None,
        "http_status": None,
        "bytes": 0,
        "error": None,
    }
    try:
        status, body = _get(plan, "/metrics")
        row |= {"http_status": status, "bytes": len(body)}
        name = f"{ts:.3f}.prom"
        write_atomic(plan.out / "metrics" / name, body)
        row["file"] = name
        result.scrapes_ok += 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
        result.scrapes_failed += 1
    row["ts_done"] = round(time.time(), 3)
    _append_jsonl(plan.out / "metrics" / "scrapes.jsonl", row)


def gpu_snapshot(plan: CollectPlan, result: CollectResult) -> None:
    """nvidia-smi query CSVs for GPUs and compute apps, and its table, stamped with the time."""
    if plan.nvidia_smi is None:
        return
    ts = f"{time.time():.3f}"
    for suffix, args in (
        (".csv", ["--query-gpu=" + GPU_QUERY, "--format=csv"]),
        (".apps.csv", ["--query-compute-apps=" + APPS_QUERY, "--format=csv"]),
        (".txt", []),  # the table: per-process memory where the query cannot see it
    ):
        try:
            out = subprocess.run(
                [plan.nvidia_smi, *args],
                capture_output=True,
                timeout=plan.timeout_s,
                check=True,
            ).stdout
        except (subprocess.SubprocessError, OSError) as exc:
            result.errors.append(f"nvidia-smi {' '.join(args[:1]) or '(table)'}: {exc}")
            continue
        write_atomic(plan.out / "nvidia-smi" / f"{ts}{suffix}", out)
    result.gpu_snapshots += 1


def describe_server(plan: CollectPlan, result: CollectResult) -> None:
    """Save what the server says about itself (/version, /v1/models)."""
    for path, name in (("/version", "version.json"), ("/v1/models", "models.json")):
        try:
            _, body = _get(plan, path)
            write_atomic(plan.out / "server" / name, body)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            result.errors.append(f"GET {path}: {exc}")


def write_manifest(plan: CollectPlan, result: CollectResult, started: float) -> None:
    manifest = {
        "collected_by": f"kvdiag {__version__}",
        "url": plan.url,
        "started": round(started, 3),
        "ended": round(time.time(), 3),
        "interval_s": plan.interval_s,
        "duration_s": plan.duration_s,
        "scrapes_ok": result.scrapes_ok,
        "scrapes_failed": result.scrapes_failed,
        "gpu_snapshots": result.gpu_snapshots,
        "nvidia_smi": plan.nvidia_smi is not None,
        "interrupted": result.interrupted,
        "errors": result.errors[-50:],
    }
    write_atomic(plan.out / "manifest.json", (json.dumps(manifest, indent=2) + "\n").encode())


def collect(
    plan: CollectPlan,
    tick: Callable[[CollectResult, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CollectResult:
    """Scrape and snapshot every `interval_s` for `duration_s`; Ctrl-C ends it cleanly."""
    result = CollectResult()
    started = time.time()
    (plan.out / "metrics").mkdir(parents=True, exist_ok=True)
    try:
        describe_server(plan, result)
        deadline = time.monotonic() + plan.duration_s
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            scrape_once(plan, result)
            gpu_snapshot(plan, result)
            if tick is not None:
                tick(result, max(0.0, deadline - time.monotonic()))
            next_at += plan.interval_s
            sleep(max(0.0, next_at - time.monotonic()))
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        write_manifest(plan, result, started)
    return result
