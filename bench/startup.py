"""The fixed cost of a command (a benchmark, not a test): issue 31's small-input targets.

    python bench/startup.py            # 5 rounds, each running every case once

Prints, for `kvdiag --version`, `kvdiag --help`, a 10-line pasted fragment and the
bundled example, the median and the least wall time of a fresh process, its least CPU time
(user + system: what other processes on a shared machine change least), its target and
the ratio of the median. Also, timed in the same rounds, the floor every analysis pays:
Python, `import polars, duckdb`, a connection and one result handed to polars.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVDIAG = [sys.executable, "-m", "kvdiag"]
FRAGMENT_SOURCE = ROOT / "fixtures" / "vllm-b-saturation" / "incident" / "server.log"
RUNS = 5
FLOOR = "import polars, duckdb; polars.DataFrame(duckdb.connect().sql('SELECT 1 AS x'))"
# As from an installed package: Python may cache kvdiag's bytecode (harness.installed_env).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run(args: list[str]) -> tuple[float, float]:
    """(wall, user + system CPU) of one fresh process."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        fragment = Path(scratch) / "paste.log"
        lines = FRAGMENT_SOURCE.read_text().splitlines()
        fragment.write_text("\n".join(lines[60:70]) + "\n")  # stats lines, as pasted
        cases: list[tuple[str, list[str], float | None]] = [
            ("floor: Python, polars, DuckDB, one result", [sys.executable, "-c", FLOOR], None),
            ("kvdiag --version", [*KVDIAG, "--version"], 0.2),
            ("kvdiag --help", [*KVDIAG, "--help"], 0.2),
            ("a 10-line fragment", [*KVDIAG, "analyze", str(fragment), "-q"], 0.6),
            (
                "the bundled example",
                [*KVDIAG, "analyze", "--example", "vllm-b-saturation", "-q"],
                1.2,
            ),
        ]
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
        for _ in range(RUNS):  # rounds: every case under the same minute's conditions
            for name, args, _ in cases:
                runs[name].append(_run(args))
        for name, _, target in cases:
            walls, cpus = [w for w, _ in runs[name]], [c for _, c in runs[name]]
            took = statistics.median(walls)
            row: dict[str, object] = {"case": name, "median_s": round(took, 3)}
            row |= {"min_s": round(min(walls), 3), "min_cpu_s": round(min(cpus), 3)}
            if target is not None:
                row |= {"target_s": target, "ratio_to_target": round(took / target, 2)}
                row["met"] = took < target
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
