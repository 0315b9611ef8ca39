"""`kvdiag collect` against a loopback server that replays a real run's scrapes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvdiag.analyzer.collect import CollectPlan, collect, parse_duration
from kvdiag.analyzer.exitcodes import ExitCode
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
