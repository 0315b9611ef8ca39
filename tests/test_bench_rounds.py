"""bench/run_bench.py times kvdiag and its baselines in rounds, so each ratio pairs times
taken minutes apart, not all of kvdiag's runs before all of the baselines'."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_support import load_bench


def _run_bench() -> ModuleType:
    return load_bench("run_bench")


def test_each_round_runs_kvdiag_then_every_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    rb = _run_bench()
    calls: list[str] = []
    walls = iter([30.0, 50.0, 40.0])  # kvdiag's three runs, a slow one in the middle
    peaks = iter([400.0, 480.0, 420.0])

    def fake_kvdiag(incident: Path) -> object:
        calls.append("kvdiag")
        wall = next(walls)
        return rb.Run(wall, next(peaks), {"ingest": wall / 2})

    monkeypatch.setattr(rb, "kvdiag_run", fake_kvdiag)
    # The baseline ran slower exactly when kvdiag did: the machine, not either program.
    prom = iter([600.0, 1000.0, 800.0])

    def baseline(name: str, times: Iterator[float]) -> Callable[[], float]:
        def measure() -> float:
            calls.append(name)
            return next(times)

        return measure

    run, medians, spread = rb.rounds(
        Path("x"),
        3,
        {
            "prometheus_client": baseline("prom", prom),
            "grep_c": baseline("grep", iter([1.0, 2.0, 3.0])),
        },
    )
    assert calls == ["kvdiag", "prom", "grep"] * 3
    assert (run.wall_s, run.peak_rss_mib, run.timings) == (40.0, 480.0, {"ingest": 20.0})
    assert medians == {"prometheus_client": 800.0, "grep_c": 2.0}
    assert spread["kvdiag_s_all"] == [30.0, 50.0, 40.0]  # in round order, not sorted
    assert spread["prometheus_client_s_all"] == [600.0, 1000.0, 800.0]
    assert rb.per_round(spread, "prometheus_client", "kvdiag") == [20.0, 20.0, 20.0]


def test_an_even_count_of_rounds_takes_the_upper_median() -> None:
    rb = _run_bench()
    assert rb.upper_median([1.0, 2.0, 3.0, 4.0]) == 3.0


def test_uncached_rounds_evict_the_input_before_every_timed_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rb = _run_bench()
    calls: list[str] = []
    monkeypatch.setattr(rb, "kvdiag_run", lambda _: calls.append("kvdiag") or rb.Run(1, 1, {}))
    monkeypatch.setattr(rb, "evict", lambda paths: calls.append(f"evict {len(paths)}"))
    monkeypatch.setattr(rb, "warm", lambda paths: calls.append("warm"))
    files = [tmp_path / "a", tmp_path / "b"]
    before = rb.prepare(files, uncached=True)
    rb.rounds(Path("x"), 2, {"grep_c": lambda: calls.append("grep") or 1.0}, before)
    assert calls == ["evict 2", "kvdiag", "evict 2", "grep"] * 2
    calls.clear()
    before = rb.prepare(files, uncached=False)  # cached: read once, nothing between
    rb.rounds(Path("x"), 2, {"grep_c": lambda: calls.append("grep") or 1.0}, before)
    assert calls == ["warm"] + ["kvdiag", "grep"] * 2


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise here")
def test_evicting_leaves_the_input_as_it_was(tmp_path: Path) -> None:
    rb = _run_bench()
    f = tmp_path / "server.log"
    f.write_bytes(b"INFO 05-01 10:00:00 [x.py:1] hi\n" * 1000)
    rb.evict([f])
    assert f.read_bytes() == b"INFO 05-01 10:00:00 [x.py:1] hi\n" * 1000
