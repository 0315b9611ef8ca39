"""The commands kvdiag is timed against, on the same bytes (bench/run_bench.py): `grep -c`,
a plain Python `re` loop over the lines, polars reading the lines with one literal test
each (a floor of the logs target), and prometheus_client's text parser for scrapes."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

SCRAPE_RE = re.compile(r"^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)")
STATS_RE = re.compile(r"Running: (\d+) reqs, Waiting: (\d+) reqs, \w+ KV cache usage: ([\d.]+)%")


def grep_count(paths: list[Path], pattern: str = "KV cache usage") -> float:
    start = time.perf_counter()
    for chunk in range(0, len(paths), 2000):
        subprocess.run(
            ["grep", "-c", pattern, *map(str, paths[chunk : chunk + 2000])], capture_output=True
        )
    return time.perf_counter() - start


def python_re_loop(paths: list[Path], pattern: re.Pattern[str] = STATS_RE) -> float:
    """A plain Python loop: every line of every file through one compiled regex."""
    start = time.perf_counter()
    hits = 0
    for path in paths:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if pattern.search(line):
                    hits += 1
    return time.perf_counter() - start


# What polars alone takes to read a log's lines and test one literal in each, streaming
# in bounded memory (its native line reader, exact on any byte): the least a design built
# on it does before it parses anything. DuckDB's CSV reader, as fast here (0.95-1.14 s for
# 1 GB on 1 Dec), is no line reader: its sniffer rejected a real log with one \x01 added.
_POLARS_COUNT = """
import sys, polars as pl
hits = pl.scan_lines(sys.argv[2]).filter(pl.col("line").str.contains(sys.argv[1], literal=True))
print(hits.select(pl.len()).collect(engine="streaming").item())
"""


def polars_count(path: Path, literal: str = "KV cache usage") -> tuple[float, int]:
    """Seconds (process start included, as kvdiag's) and the count of lines holding
    `literal`, for polars reading the lines with one literal test each."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _POLARS_COUNT, literal, str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return time.perf_counter() - start, int(out)


def prometheus_client_time(files: list[Path], sample: int) -> float:
    """Seconds prometheus_client takes for all files, extrapolated from `sample` files."""
    from prometheus_client.parser import text_string_to_metric_families

    chosen = files[:sample]
    start = time.perf_counter()
    for f in chosen:
        for family in text_string_to_metric_families(f.read_text()):
            for _ in family.samples:
                pass
    took = time.perf_counter() - start
    return took * len(files) / len(chosen)
