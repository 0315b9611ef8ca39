"""Timing kvdiag for the benchmarks: a run's wall time, peak RSS and phase timings, and
rounds that pair each kvdiag run with its baselines taken minutes apart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class Run:
    wall_s: float
    peak_rss_mib: float
    timings: dict[str, float]


def kvdiag_run(incident: Path) -> Run:
    """Run `kvdiag analyze`: wall time, peak RSS and its --timings."""
    report = incident.parent / f"{incident.name}.json"
    cmd = [
        sys.executable,
        "-m",
        "kvdiag",
        "analyze",
        str(incident),
        "-f",
        "json",
        "-q",
        "-o",
        str(report),
        "--timings",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=installed_env())
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    # The kernel's high-water mark of the child (kvdiag starts no processes of its own):
    # exact, where sampling every 50 ms missed short peaks by up to ~160 MiB.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    wall = time.perf_counter() - start
    peak = usage.ru_maxrss * 1024
    if proc.returncode not in (0, 1):
        raise SystemExit(f"kvdiag failed ({proc.returncode}):\n{stderr}")
    timings = {}
    for line in stderr.splitlines():
        if line.startswith("timing "):
            _, phase, seconds = line.split()
            timings[phase] = float(seconds)
    return Run(wall, peak / 2**20, timings)


def installed_env() -> dict[str, str]:
    """The environment kvdiag runs in, as from an installed package: Python may cache the
    bytecode of kvdiag's modules. With PYTHONDONTWRITEBYTECODE set (as in some shells and
    containers) an editable install compiled all of kvdiag's source at every start."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def compile_kvdiag() -> None:
    """Write kvdiag's bytecode before the first timed run, as pip does on install."""
    import compileall

    import kvdiag

    compileall.compile_dir(Path(kvdiag.__file__).parent, quiet=1)


def rounds(
    incident: Path,
    repeat: int,
    baselines: dict[str, Callable[[], float]],
    before: Callable[[], None] = lambda: None,
) -> tuple[Run, dict[str, float], dict[str, object]]:
    """`repeat` rounds, each running kvdiag then every baseline once: (the median kvdiag
    run, with the highest peak RSS; the median time of each baseline; the spread).
    `before` runs, untimed, before each of them (--uncached: the input evicted).

    A round keeps each ratio's two times minutes apart at most: on a shared 2-core machine
    timings vary by 15-20 % from run to run and drift over an hour, and all kvdiag runs
    before all baseline runs compared the two under different conditions.
    """
    runs: list[Run] = []
    times: dict[str, list[float]] = {name: [] for name in baselines}
    for _ in range(repeat):
        before()
        runs.append(kvdiag_run(incident))
        for name, measure in baselines.items():
            before()
            times[name].append(measure())
    median = upper_median(sorted(runs, key=lambda r: r.wall_s))
    peak = max(r.peak_rss_mib for r in runs)
    spread = {"runs": repeat, "kvdiag_s_all": [round(r.wall_s, 2) for r in runs]}
    spread |= {f"{name}_s_all": [round(t, 2) for t in ts] for name, ts in times.items()}
    medians = {name: upper_median(sorted(ts)) for name, ts in times.items()}
    return Run(median.wall_s, peak, median.timings), medians, spread


def upper_median(ordered: list[T]) -> T:
    """The middle item of a sorted list; of an even count, the upper one (a run that was)."""
    return ordered[len(ordered) // 2]


def warm(paths: list[Path]) -> None:
    """Read the input once so that kvdiag, like the baselines timed after it, finds it in
    the page cache (a day of scrapes read cold took 24 s more in discovery alone)."""
    for path in paths:
        with path.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def evict(paths: list[Path]) -> None:
    """Drop the input from the page cache, so the next command reads it from the disk, as
    on a machine where the incident folder was copied days ago (POSIX_FADV_DONTNEED; the
    input is synced first: a page not yet written cannot be dropped)."""
    os.sync()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def prepare(paths: list[Path], uncached: bool) -> Callable[[], None]:
    """What runs before each timed command: nothing once the input is cached (read once
    here), or evicting it again (--uncached)."""
    if uncached:
        return lambda: evict(paths)
    warm(paths)
    return lambda: None


def per_round(spread: dict[str, Any], over: str, under: str) -> list[float]:
    """The ratio `over` / `under` of each round (times of the same few minutes)."""
    pairs = zip(spread[f"{over}_s_all"], spread[f"{under}_s_all"], strict=True)
    return [round(a / b, 1) for a, b in pairs]
