"""`kvdiag collect` against a loopback server that replays a real run's scrapes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvdiag.analyzer.live import collect as collect_module
from kvdiag.analyzer.live.collect import (
    CollectPlan,
    CollectResult,
    collect,
    scrape_once,
)
from kvdiag.analyzer.live.durations import parse_duration
from kvdiag.domain.exitcodes import ExitCode
from tests.conftest import FIXTURES, analyze_json, run_cli

RECORDED = FIXTURES / "vllm-b-saturation" / "incident"


class _Replay(BaseHTTPRequestHandler):
    bodies: tuple[bytes, ...] = ()
    served = 0

    def do_GET(self) -> None:
        if self.path == "/metrics":
            cls = type(self)
            body = cls.bodies[min(cls.served, len(cls.bodies) - 1)]
            cls.served += 1
            self._send(200, body, "text/plain; version=0.0.4")
        elif self.path == "/version":
            self._send(200, b'{"version": "0.32.0"}', "application/json")
        else:
            self._send(404, b"not found", "text/plain")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def replay_server() -> Iterator[str]:
    handler = type(
        "Replay",
        (_Replay,),
        {
            "bodies": [p.read_bytes() for p in sorted((RECORDED / "metrics").glob("*.prom"))],
            "served": 0,
        },
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_durations() -> None:
    assert (
        parse_duration("10m") == 600 and parse_duration("500ms") == 0.5 and parse_duration("2") == 2
    )
    with pytest.raises(ValueError):
        parse_duration("ten minutes")


def test_collected_folder_analyses_like_the_recorded_run(
    replay_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "incident"
    result = run_cli(
        "collect",
        "--url",
        replay_server,
        "--out",
        str(out),
        "--duration",
        "8s",
        "--interval",
        "30ms",
        "-q",
    )
    assert result.exit_code == 0, result.output
    scrapes = sorted((out / "metrics").glob("*.prom"))
    assert len(scrapes) > 150
    assert scrapes[0].read_bytes() == sorted((RECORDED / "metrics").glob("*.prom"))[0].read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scrapes_ok"] == len(scrapes) and not manifest["interrupted"]
    assert json.loads((out / "server" / "version.json").read_text())["version"] == "0.32.0"
    _, recorded = analyze_json(RECORDED)
    code, collected = analyze_json(out)
    assert code == ExitCode.FINDINGS
    assert collected["verdict"]["primary"] == recorded["verdict"]["primary"] == "saturation"
    assert collected["facts"]["pool_tokens"]["value"] == 8704


def test_interrupt_keeps_what_was_collected(replay_server: str, tmp_path: Path) -> None:
    ticks = 0

    def sleep(_: float) -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 5:
            raise KeyboardInterrupt

    plan = CollectPlan(
        url=replay_server, out=tmp_path, duration_s=60, interval_s=1, nvidia_smi=None
    )
    result = collect(plan, sleep=sleep)
    assert result.interrupted and result.scrapes_ok == 5
    assert len(list((tmp_path / "metrics").glob("*.prom"))) == 5
    assert not list(tmp_path.rglob(".*.prom.*")), "no half-written temp files"
    assert json.loads((tmp_path / "manifest.json").read_text())["interrupted"] is True


def test_unreachable_server_is_logged_not_fatal(tmp_path: Path) -> None:
    plan = CollectPlan(
        url="http://127.0.0.1:9",
        out=tmp_path,
        duration_s=0.3,
        interval_s=0.1,
        timeout_s=0.5,
        nvidia_smi=None,
    )
    result = collect(plan)
    assert result.scrapes_ok == 0 and result.scrapes_failed >= 1
    rows = [
        json.loads(line)
        for line in (tmp_path / "metrics" / "scrapes.jsonl").read_text().splitlines()
    ]
    assert all(r["error"] for r in rows)


def _fake_nvidia_smi(folder: Path) -> Path:
    """A stand-in for nvidia-smi: query CSVs in its format, and a real recorded table."""
    table = FIXTURES / "gpu-overcommit-oom-3090" / "incident" / "nvidia-smi.txt"
    gpus = (
        "index, uuid, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
        "memory.reserved [MiB], utilization.gpu [%]\n"
        "0, GPU-5f1c, NVIDIA GeForce RTX 3090, 24576 MiB, 23801 MiB, 351 MiB, 424 MiB, 97 %\n"
    )
    apps = "gpu_uuid, pid, process_name, used_memory [MiB]\nGPU-5f1c, 4242, python3, 23340 MiB\n"
    (folder / "gpus.csv").write_text(gpus)
    (folder / "apps.csv").write_text(apps)
    fake = folder / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-gpu=*) cat {folder / 'gpus.csv'} ;;\n"
        f"  --query-compute-apps=*) cat {folder / 'apps.csv'} ;;\n"
        f"  *) cat {table} ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    return fake


def test_gpu_snapshots_follow_the_scrape_cadence(replay_server: str, tmp_path: Path) -> None:
    out = tmp_path / "incident"
    fake = _fake_nvidia_smi(tmp_path)
    plan = CollectPlan(replay_server, out, duration_s=0.35, interval_s=0.1, nvidia_smi=str(fake))
    result = collect(plan)
    assert result.gpu_snapshots >= 3
    assert not [e for e in result.errors if "nvidia-smi" in e], result.errors
    files = [p.name for p in (out / "nvidia-smi").iterdir()]
    for suffix in (".apps.csv", ".txt"):
        assert sum(f.endswith(suffix) for f in files) == result.gpu_snapshots, suffix
    _, diagnosis = analyze_json(out)
    used = {r["kind"] for r in diagnosis["inputs"] if r["status"] == "used"}
    assert "nvidia_smi" in used, diagnosis["inputs"]
    assert "no nvidia-smi or dcgm snapshot" not in {
        m["what"] for m in diagnosis["missing_evidence"]
    }


def test_scrapes_within_one_millisecond_keep_a_file_each(
    replay_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalled loop catching up fires scrapes back to back: none may overwrite another."""
    plan = CollectPlan(replay_server, tmp_path, duration_s=1, interval_s=1, nvidia_smi=None)
    (tmp_path / "metrics").mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(collect_module.time, "time", lambda: 1_796_000_000.0004)
    result = CollectResult()
    for _ in range(3):
        scrape_once(plan, result)
    names = sorted(p.name for p in (tmp_path / "metrics").glob("*.prom"))
    assert result.scrapes_ok == 3
    assert names == ["1796000000.000.prom", "1796000000.001.prom", "1796000000.002.prom"]
