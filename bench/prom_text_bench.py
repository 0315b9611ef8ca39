"""Throughput of the Prometheus text ingester on a folder of scrapes.

    .venv/bin/python bench/prom_text_bench.py [FOLDER] [--repeat N]

Prints MB/s (wall and process CPU time) and, when prometheus_client is installed (it is
not a dependency: `pip install prometheus_client` to compare), the ratio against
`prometheus_client.parser.text_string_to_metric_families` on the same files. Issue 7 asks
for at least 20x. The two runs are interleaved so that load from other processes hits
both alike; the best of N repeats is reported.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from kvdiag.analyzer.ingest.base import IngestContext, InputUnit
from kvdiag.analyzer.ingest.metrics.exposition import PromTextIngester

DEFAULT = Path(__file__).resolve().parents[1] / "fixtures/vllm-b-saturation/incident/metrics"


def _kvdiag(unit: InputUnit, ctx: IngestContext) -> Callable[[], int]:
    def run() -> int:
        return sum(
            getattr(e, "frame", None) is not None for e in PromTextIngester().ingest(unit, ctx)
        )

    return run


def _reference(files: list[Path]) -> Callable[[], int] | None:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return None

    def run() -> int:
        n = 0
        for f in files:
            for family in text_string_to_metric_families(f.read_text()):
                n += len(family.samples)
        return n

    return run


def _best(fn: Callable[[], int], repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    files = sorted(args.folder.glob("*.prom"))
    size = sum(f.stat().st_size for f in files)
    rels = tuple(f"metrics/{f.name}" for f in files)
    unit = InputUnit("prom_text", "metrics", tuple(files), rels, size, "default")
    ctx = IngestContext(args.folder, None, None, None)
    ours = _kvdiag(unit, ctx)
    ours()  # warm-up: imports, regex compilation
    ref = _reference(files)
    mb = size / 1e6
    print(f"{len(files)} files, {mb:.1f} MB")
    wall, cpu = _best(ours, args.repeat)
    print(f"kvdiag            {wall:.3f} s wall ({mb / wall:6.1f} MB/s), {cpu:.3f} s CPU")
    if ref is None:
        print("prometheus_client not installed: no ratio")
        return
    rwall, rcpu = _best(ref, max(1, args.repeat // 2))
    print(f"prometheus_client {rwall:.3f} s wall ({mb / rwall:6.1f} MB/s), {rcpu:.3f} s CPU")
    print(f"ratio: {rwall / wall:.1f}x wall, {rcpu / cpu:.1f}x CPU")


if __name__ == "__main__":
    main()
