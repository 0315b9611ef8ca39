"""Benchmark `kvdiag redact` on a large real-shaped log (a benchmark, not a test).

The log is the steady gigabyte of bench/run_bench.py (a real run's lines replayed), with
every access line's client made a private address, so that the ip pattern works on every
request as it would on a production log. Printed as JSON lines: redact's wall time and
peak RSS (the kernel's high-water mark of the child), the time to read the same bytes
(`wc -l`), `kvdiag analyze` on the same file, and the ratios.

    python bench/redact_bench.py            # 1 GB
    python bench/redact_bench.py --gb 0.2   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_incident import make_logs

OUT = Path(__file__).resolve().parent / "out"
_CLIENT = re.compile(rb"^INFO:     127\.0\.0\.1:")
_CLIENTS = 2000


def make_input(gigabytes: float) -> Path:
    """bench/out/redact-<gb>/server.log, built once and reused."""
    folder = OUT / f"redact-{gigabytes:g}"
    path = folder / "server.log"
    if path.exists():
        return folder
    steady = make_logs(OUT / f"logs-{gigabytes:g}", gigabytes)
    rng = random.Random(7)
    # A busy service's clients: a few thousand addresses, each on many requests.
    clients = [
        b"10.%d.%d.%d" % (rng.randint(0, 3), rng.randint(0, 255), rng.randint(1, 254))
        for _ in range(_CLIENTS)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    with steady.open("rb") as src, path.open("wb") as dst:
        for line in src:
            if _CLIENT.match(line):
                line = _CLIENT.sub(b"INFO:     " + rng.choice(clients) + b":", line, count=1)
            dst.write(line)
    return folder


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of a child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        assert proc.stderr is not None
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}): {proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--no-analyze", action="store_true", help="skip the analyze baseline")
    args = parser.parse_args()
    folder = make_input(args.gb)
    log = folder / "server.log"
    size = log.stat().st_size
    kvdiag = [sys.executable, "-m", "kvdiag"]
    read_s, _ = timed(["wc", "-l", str(log)])
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        bundle = Path(tmp) / "bundle.tar.gz"
        redact_s, redact_mib = timed([*kvdiag, "redact", str(folder), "-o", str(bundle), "-q"])
        bundle_mb = bundle.stat().st_size / 1e6
    row = {
        "input_mb": round(size / 1e6),
        "read_s": round(read_s, 2),
        "redact_s": round(redact_s, 1),
        "redact_peak_rss_mib": round(redact_mib),
        "redact_mb_per_s": round(size / 1e6 / redact_s, 1),
        "redact_over_read": round(redact_s / read_s, 1),
        "bundle_mb": round(bundle_mb, 1),
    }
    if not args.no_analyze:
        analyze_s, analyze_mib = timed([*kvdiag, "analyze", str(folder), "-q", "-f", "json"])
        row |= {
            "analyze_s": round(analyze_s, 1),
            "analyze_peak_rss_mib": round(analyze_mib),
            "redact_over_analyze": round(redact_s / analyze_s, 2),
        }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
