"""Fleet benchmark: N replicas x H hours in a local Prometheus, analysed with --prometheus.

Each replica replays a real run's scrapes (healthy runs a, c2, h2; two hot: b, i) cycle
after cycle until H hours are filled, every `--every`-th scrape kept (the real runs scrape
every second; keeping every 15th gives a 15 s scrape interval). Only the series the live
source fetches are backfilled. Prints the time of each phase and the ratio to the target
(200 replicas x 24 h in under 60 s). Needs Debian's prometheus package.

    python -m bench.bench_fleet --replicas 200 --hours 24 --every 15
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.live_support import Replay, planned_names, scrape_files, serve

ROOT = Path(__file__).resolve().parents[1]
NORMAL = ("vllm-a-healthy", "vllm-c2-prefill-peak-prefix", "vllm-h2-padding-block32")
HOT = ("vllm-b-saturation", "vllm-i-ramp")
T0 = 1_796_000_000.0
TARGET_S = 60.0


def _thinned(run: str, every: int, scratch: Path) -> Path:
    """The run's scrape folder with every `every`-th scrape (symlinks, nothing copied)."""
    src = ROOT / "fixtures" / run / "incident" / "metrics"
    out = scratch / f"{run}-{every}"
    if not out.exists():
        out.mkdir()
        for _, path in scrape_files(src)[::every]:
            (out / path.name).symlink_to(path)
    return out


def replays(replicas: int, hours: float, every: int, scratch: Path) -> list[Replay]:
    keep = planned_names().__contains__
    out = []
    for i in range(replicas):
        run = HOT[i // 2 % 2] if i in (replicas // 3, 2 * replicas // 3) else NORMAL[i % 3]
        folder = _thinned(run, every, scratch)
        times = [t for t, _ in scrape_files(folder)]
        cycle = times[-1] - times[0] + every  # a restart between cycles: counters reset
        for k in range(max(1, int(hours * 3600 // cycle))):
            shift = T0 + k * cycle + (i % 7) - times[0]
            out.append(Replay(folder, "fleet", f"replica-{i:03d}", shift, keep=keep))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=200)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--every", type=int, default=15, help="keep every Nth scrape (1 s apart)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvdiag-fleet-bench-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        server = serve(replays(args.replicas, args.hours, args.every, work), work)
        print(f"backfill+start {time.perf_counter() - started:.1f} s", flush=True)
        try:
            until = T0 + args.hours * 3600 + 10
            cmd = [sys.executable, "-m", "kvdiag", "analyze", "--prometheus", server.url]
            cmd += ["--since", f"{T0 - 1:.0f}", "--until", f"{until:.0f}"]
            cmd += ["--selector", '{job="fleet"}', "--timings", "-f", "json", "-o", "/dev/null"]
            t = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            total = time.perf_counter() - t
        finally:
            server.stop()
    print(done.stderr.strip())
    print(f"replicas {args.replicas} hours {args.hours:g} scrape interval {args.every} s")
    print(
        f"analyze --prometheus total {total:.1f} s; ratio to the {TARGET_S:.0f} s target "
        f"{total / TARGET_S:.2f}"
    )


if __name__ == "__main__":
    main()
