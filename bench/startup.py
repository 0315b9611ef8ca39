"""The fixed cost of a command (a benchmark, not a test): issue 31's small-input targets.

    python bench/startup.py            # median of 5 runs each

Prints, for `kvdiag --version`, `kvdiag --help`, a 10-line pasted fragment and the
bundled example, the median wall time of a fresh process, its target and the ratio.
"""

from __future__ import annotations

import json
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


def _median(args: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run(args, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        fragment = Path(scratch) / "paste.log"
        lines = FRAGMENT_SOURCE.read_text().splitlines()
        fragment.write_text("\n".join(lines[60:70]) + "\n")  # stats lines, as pasted
        cases = [
            ("kvdiag --version", [*KVDIAG, "--version"], 0.2),
            ("kvdiag --help", [*KVDIAG, "--help"], 0.2),
            ("a 10-line fragment", [*KVDIAG, "analyze", str(fragment), "-q"], 0.6),
            (
                "the bundled example",
                [*KVDIAG, "analyze", "--example", "vllm-b-saturation", "-q"],
                1.2,
            ),
        ]
        for name, args, target in cases:
            took = _median(args)
            row = {"case": name, "median_s": round(took, 3), "target_s": target}
            row |= {"ratio_to_target": round(took / target, 2), "met": took < target}
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
