"""bench/run_bench.py times kvdiag and its baselines in rounds (bench/harness.py), so each
ratio pairs times taken minutes apart, not all of kvdiag's runs before all of the baselines'."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_support import load_bench


def _run_bench() -> ModuleType:
    return load_bench("harness")


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


def test_polars_counts_the_lines_holding_the_literal_as_a_plain_reading_does(
    tmp_path: Path,
) -> None:
    baselines = load_bench("baselines")
    # The fixture's real log, with lines that a CSV reader could take for more than one
    # field or a quoted one: a comma, a double quote, the \x01 the readers split on.
    log = tmp_path / "server.log"
    text = (load_bench("make_incident").FIXTURE / "server.log").read_text()
    log.write_text(text + 'KV cache usage, "quoted\n\x01 KV cache usage\n\nno\n')
    plain = sum("KV cache usage" in line for line in log.read_text().splitlines())
    seconds, hits = baselines.polars_count(log)
    assert hits == plain == 17 + 2  # the fixture's stats lines and the two added
    assert seconds > 0


def test_the_floor_line_compares_the_floors_with_the_logs_budget() -> None:
    targets = load_bench("targets")
    budget = targets.MAX_X_GREP * 0.5  # the target's ratio to grep -c's 0.5 s
    row = {"input": "1.00 GB vLLM log", "grep_c_s": 0.5, "kvdiag_fixed_s": 1.5}
    above = {"polars_count_s": budget - 1.0, "floor_s": budget + 0.5, "floor_x_grep": 99.0}
    over = targets.floor_line(row | above)
    assert over.endswith(f"budget of {budget:.2f} s: over it before a line is parsed")
    assert f"1.5 s + polars counting one literal in every line {budget - 1.0:g} s" in over
    assert f"= {budget + 0.5:g} s (99x grep -c)" in over
    under = targets.floor_line(row | {"polars_count_s": 0.4, "floor_s": 1.9, "floor_x_grep": 3.8})
    assert "+ polars counting one literal in every line 0.4 s = 1.9 s" in under
    assert under.endswith(f"budget of {budget:.2f} s: under it")


def test_kvdiag_is_timed_with_its_bytecode_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    rb = _run_bench()
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("KVDIAG_BENCH_PROBE", "kept")
    env = rb.installed_env()
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["KVDIAG_BENCH_PROBE"] == "kept"
