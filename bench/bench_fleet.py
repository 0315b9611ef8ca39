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
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.live_support import (
    PrometheusServer,
    Replay,
    backfill,
    openmetrics,
    planned_names,
    scrape_files,
)

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


def write_fleet(replays: list[Replay], path: Path) -> int:
    """All replays as one OpenMetrics file, each replica's lines made once for all its cycles.

    The same lines as tests.live_support.write_openmetrics, which re-reads and re-parses every
    scrape of every cycle: at 200 replicas x 24 h that alone takes most of an hour.
    """
    count = 0
    made: tuple[tuple[Path, str], list[tuple[float, list[str]]]] | None = None
    with path.open("w", encoding="utf-8") as fh:
        for replay in replays:
            key = (replay.scrapes, replay.instance)
            if made is None or made[0] != key:
                made = key, _unstamped(replay)
            for ts, lines in made[1]:
                stamp = f" {ts + replay.shift_s:.3f}\n"
                fh.write(stamp.join(lines) + stamp)
                count += len(lines)
        fh.write("# EOF\n")
    return count


def _unstamped(replay: Replay) -> list[tuple[float, list[str]]]:
    """(scrape time, sample lines without their time) of one replica's recorded scrapes."""
    plain = Replay(replay.scrapes, replay.job, replay.instance, 0.0, replay.keep, replay.value)
    by_time: dict[float, list[str]] = {}
    for line in openmetrics(plain):
        head, _, ts = line.rpartition(" ")
        by_time.setdefault(float(ts), []).append(head)
    return [(ts, lines) for ts, lines in by_time.items() if lines]


def serve(replays: list[Replay], work: Path) -> PrometheusServer:
    om = work / "replay.om"
    write_fleet(replays, om)
    backfill(om, work / "data")
    om.unlink()
    return PrometheusServer(work / "data").start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=200)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--every", type=int, default=15, help="keep every Nth scrape (1 s apart)")
    ap.add_argument(
        "--runs", type=int, default=2, help="analyses in a row (the first also warms the server)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvdiag-fleet-bench-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        server = serve(replays(args.replicas, args.hours, args.every, work), work)
        print(f"backfill+start {time.perf_counter() - started:.1f} s", flush=True)
        try:
            totals = [_analyze(server.url, args.hours) for _ in range(max(1, args.runs))]
        finally:
            server.stop()
    print(f"replicas {args.replicas} hours {args.hours:g} scrape interval {args.every} s")
    for i, total in enumerate(totals, 1):
        print(
            f"run {i}: analyze --prometheus total {total:.1f} s; ratio to the "
            f"{TARGET_S:.0f} s target {total / TARGET_S:.2f}"
        )


def _analyze(url: str, hours: float) -> float:
    """One `kvdiag analyze --prometheus` over the whole replay; prints its phases and peak RSS."""
    until = T0 + hours * 3600 + 10
    cmd = [sys.executable, "-m", "kvdiag", "analyze", "--prometheus", url]
    cmd += ["--since", f"{T0 - 1:.0f}", "--until", f"{until:.0f}"]
    cmd += ["--selector", '{job="fleet"}', "--timings", "-f", "json", "-o", "/dev/null"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest so far
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    total = time.perf_counter() - t
    print(err.strip(), flush=True)
    print(f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB", flush=True)
    return total


if __name__ == "__main__":
    main()
