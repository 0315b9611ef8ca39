"""The terminal report: colour only on a TTY without NO_COLOR, progress on stderr only,
and a compact findings table."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys

from kvdiag.analyzer.progress import CHARTING, CHECKING
from kvdiag.reports.text import render_text
from tests.conftest import FIXTURES, run_cli
from tests.goldens import fixture_diagnosis

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"
SMALL = FIXTURES / "vllm-e-startup-refusal" / "incident"  # one log file: a quick run


def _run_with_ttys(
    args: list[str], *, stdout_tty: bool, stderr_tty: bool, env: dict[str, str]
) -> tuple[bytes, bytes, int]:
    """Run kvdiag with stdout and/or stderr on a pseudo-terminal; returns both streams."""
    fds: dict[str, tuple[int, int]] = {}
    for name, tty in (("out", stdout_tty), ("err", stderr_tty)):
        fds[name] = pty.openpty() if tty else os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvdiag", *args],
        stdin=subprocess.DEVNULL,
        stdout=fds["out"][1],
        stderr=fds["err"][1],
        env={**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, **env},
    )
    for _, write in fds.values():
        os.close(write)
    data = {name: b"" for name in fds}
    readers = {fds[name][0]: name for name in fds}
    while readers:
        ready, _, _ = select.select(list(readers), [], [], 60)
        assert ready, "kvdiag produced nothing for 60 s"
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pty reports EIO once the child has closed it
                chunk = b""
            if chunk:
                data[readers[fd]] += chunk
            else:
                os.close(fd)
                del readers[fd]
    return data["out"], data["err"], proc.wait(timeout=60)


def test_colour_on_a_tty_and_none_with_no_color() -> None:
    args = ["analyze", str(SMALL), "-q"]
    out, _, _ = _run_with_ttys(args, stdout_tty=True, stderr_tty=False, env={})
    assert b"VERDICT  \x1b[" in out
    out, _, _ = _run_with_ttys(args, stdout_tty=True, stderr_tty=False, env={"NO_COLOR": "1"})
    assert b"\x1b[" not in out and b"VERDICT  unservable_config" in out
    out, _, _ = _run_with_ttys(args, stdout_tty=False, stderr_tty=False, env={})
    assert b"\x1b[" not in out and b"VERDICT  unservable_config" in out


def test_progress_goes_to_stderr_and_never_into_stdout() -> None:
    args = ["analyze", str(SMALL), "-f", "json"]
    out, err, code = _run_with_ttys(args, stdout_tty=False, stderr_tty=True, env={})
    assert code == 1  # the refused start is an error-level finding
    assert b"reading server.log" in err  # the progress line: stderr is a terminal
    for phase in (b"finding inputs: 1 files", CHECKING.encode(), CHARTING.encode()):
        assert phase in err
    assert err.startswith(b"\r\x1b[K") and b"\n" not in err.split(b"wrote")[0]
    assert json.loads(out)["verdict"]["primary"] == "unservable_config"  # pure JSON


def test_findings_table_is_compact() -> None:
    d = fixture_diagnosis("vllm-b-saturation")
    text = render_text(d)
    lines = text.splitlines()
    header = lines.index("FINDINGS") + 1
    assert lines[header].split() == ["SEV", "CODE", "LAYER", "EVID", "TITLE"]
    rows = lines[header + 1 : header + 1 + len(d.findings)]
    for row, finding in zip(rows, d.findings, strict=True):
        layer = str(finding.layer) if finding.layer else "-"
        assert row.split()[:3] == [finding.severity.value.upper(), finding.code, layer]
        assert len(row) <= 130
    assert "server.log:167" in text
    assert "window: 2026-11-29 13:35:03 to 13:37:28 UTC" in text


def test_explicit_color_flag_colours_even_when_piped() -> None:
    out = run_cli("analyze", str(SATURATION), "-q", "--color").stdout
    assert "VERDICT  \x1b[1;31msaturation\x1b[0m" in out
