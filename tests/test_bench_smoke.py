"""bench/run_bench.py runs end to end at its smoke size: inputs built from the real fixture,
kvdiag and every baseline timed, the floors measured, a line per target printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench_support import BENCH


def test_the_logs_bench_runs_at_smoke_size(tmp_path: Path) -> None:
    # --only logs: the scrapes' baseline needs the bench extra (prometheus_client).
    command = [sys.executable, str(BENCH / "run_bench.py"), "--smoke", "--only", "logs"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    row = json.loads(lines[0])
    assert row["kind"] == "logs" and row["input"] == "0.02 GB vLLM log"
    # Each of the three is rounded on its own: their sums may differ in the last digit.
    assert abs(row["floor_s"] - row["kvdiag_fixed_s"] - row["polars_count_s"]) <= 0.011
    assert row["kvdiag_fixed_s"] > 0 and 0 < row["polars_count_s"] < row["floor_s"]
    assert set(row["timings"]) >= {"discover", "ingest", "facts", "rules", "render"}
    # Both kvdiag runs analysed what they were given: the replayed log and the fixture's own.
    big = json.loads((tmp_path / "logs-0.02gb.json").read_text())
    small = json.loads((tmp_path / "logs-floor.json").read_text())
    assert big["verdict"]["primary"] == small["verdict"]["primary"] == "saturation"
    size = (tmp_path / "logs-0.02gb" / "server.log").stat().st_size
    assert 0.02e9 <= size < 0.021e9
    assert any(line.startswith("target 0.02 GB vLLM log x grep -c: ") for line in lines)
    assert any(line.startswith("floor 0.02 GB vLLM log: kvdiag on the fixture") for line in lines)
    assert any(line.startswith("target 0.02 GB vLLM log peak RSS MiB: ") for line in lines)


def test_the_crash_loop_bench_runs_at_smoke_size(tmp_path: Path) -> None:
    command = [sys.executable, str(BENCH / "run_bench.py"), "--smoke", "--only", "crashloop"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    row = json.loads(lines[0])
    assert row["kind"] == "crashloop" and row["input"] == "0.02 GB vLLM crash loop"
    # The fixture's log (one start) replayed until 20 MB: a start every 38 KB.
    assert row["starts"] == 524
    assert row["kvdiag_s"] > 0 and row["peak_rss_mib"] > 0 and row["x_grep"] > 0
    report = json.loads((tmp_path / "crashloop-0.02gb.json").read_text())
    assert report["verdict"]["primary"] == "saturation"
    name = "0.02 GB vLLM crash loop"
    assert any(line.startswith(f"target {name} (524 starts) x grep -c: ") for line in lines)
    assert any(line.startswith(f"target {name} peak RSS MiB: ") for line in lines)
