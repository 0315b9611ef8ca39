"""Ctrl-C during a long analysis stops it and leaves no database or report behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvdiag.domain.exitcodes import ExitCode
from tests.conftest import FIXTURES

LOG = FIXTURES / "vllm-b-saturation" / "incident" / "server.log"


@pytest.mark.slow
def test_ctrl_c_during_ingestion_leaves_nothing(tmp_path: Path) -> None:
    incident = tmp_path / "incident"
    incident.mkdir()
    body = LOG.read_bytes()
    with (incident / "server.log").open("wb") as fh:
        for _ in range(max(1, (60 << 20) // len(body))):  # ~60 MB: seconds of reading
            fh.write(body)
    out = tmp_path / "out"
    out.mkdir()
    db, report = out / "incident.duckdb", out / "report.json"
    cmd = [sys.executable, "-m", "kvdiag", "analyze", str(incident), "-q"]
    cmd += ["-f", "json", "-o", str(report), "--db", str(db)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    partial = db.with_name(db.name + ".partial")
    deadline = time.monotonic() + 120
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the analysis ended before it could be interrupted"
    time.sleep(0.5)  # inside the reading, the store or a query
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert "interrupted" in err
    assert sorted(p.name for p in out.iterdir()) == []


class PanicException(BaseException):
    """Stands for pyo3's: what a Ctrl-C inside a polars call that calls Python becomes."""


def test_ctrl_c_inside_a_polars_callback_is_an_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvdiag.cli import main as cli

    def panic(**_: object) -> None:
        raise PanicException("called `Result::unwrap()` on an `Err` value: KeyboardInterrupt")

    monkeypatch.setattr(cli.cli, "main", panic)
    with pytest.raises(SystemExit) as exited:
        cli.main(["analyze", "x"])
    assert exited.value.code == ExitCode.INTERRUPTED
    assert "interrupted" in capsys.readouterr().err
