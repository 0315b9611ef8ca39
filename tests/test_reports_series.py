"""The charted series and the incident window agree with the raw scrapes and stats lines."""

from __future__ import annotations

import itertools
import re
import shutil
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import duckdb
import polars as pl
import pytest

from kvdiag.analyzer.model import chart_series as series_module
from kvdiag.analyzer.model.chart_series import (
    MIN_QUANTILE_WINDOW_S,
    QUANTILE,
    busiest_replicas,
    downsampled,
    incident_window,
)
from kvdiag.domain.records.diagnosis import Series
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import FIXTURES
from tests.goldens import fixture_diagnosis

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


@cache
def _scrapes() -> list[tuple[float, str]]:
    """(scrape time from the file name, file text) of every scrape of the saturation run."""
    files = sorted((SATURATION / "metrics").glob("*.prom"), key=lambda p: float(p.stem))
    return [(float(p.stem), p.read_text()) for p in files]


def _raw(text: str, name: str, le: str | None = None) -> float | None:
    labels = r"\{[^}]*" + (rf'le="{re.escape(le)}"' if le else "") + r"[^}]*\}"
    m = re.search(rf"^{re.escape(name)}{labels} (\S+)$", text, flags=re.M)
    return float(m.group(1)) if m else None


def _series(name: str, fixture: str = "vllm-b-saturation") -> Series:
    (found,) = [s for s in fixture_diagnosis(fixture).series if s.name == name]
    return found


def test_gauges_equal_the_raw_scrapes() -> None:
    usage = dict(_series("kv_cache_usage").points)
    waiting = dict(_series("num_requests_waiting").points)
    assert len(usage) == len(_scrapes()) == 200
    for t, text in _scrapes()[::17]:
        raw_usage = _raw(text, "vllm:kv_cache_usage_perc")
        assert raw_usage is not None
        assert usage[_iso(t)] == pytest.approx(100 * raw_usage, rel=1e-5)
        assert waiting[_iso(t)] == _raw(text, "vllm:num_requests_waiting")


def test_window_spans_usage_at_90_or_requests_waiting() -> None:
    hot = [
        t
        for t, text in _scrapes()
        if (_raw(text, "vllm:kv_cache_usage_perc") or 0) >= 0.9
        or (_raw(text, "vllm:num_requests_waiting") or 0) > 0
    ]
    assert fixture_diagnosis("vllm-b-saturation").window == (_iso(min(hot)), _iso(max(hot)))


def test_preemptions_accumulate_the_counter() -> None:
    points = _series("num_preemptions").points
    first, last = _scrapes()[0][1], _scrapes()[-1][1]
    increase = (_raw(last, "vllm:num_preemptions_total") or 0) - (
        _raw(first, "vllm:num_preemptions_total") or 0
    )
    assert points[-1][1] == increase == 29  # NOTES.md: the counter ended at 29
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(points))


def _brute_quantile(t: float, family: str) -> float | None:
    """histogram_quantile over the bucket increase since the last scrape before t - window."""
    scrapes = dict(_scrapes())
    before = [s for s in scrapes if s < t - MIN_QUANTILE_WINDOW_S]
    now_text = scrapes[t]
    bounds = sorted(
        {m for m in re.findall(rf'^{family}_bucket\{{[^}}]*le="([^"]+)"', now_text, flags=re.M)},
        key=float,
    )
    counts = []
    for le in bounds:
        now = _raw(now_text, f"{family}_bucket", le) or 0
        then = _raw(scrapes[max(before)], f"{family}_bucket", le) or 0 if before else 0
        counts.append((float(le), now - then))
    return _interpolated_p99(counts)


def _interpolated_p99(counts: list[tuple[float, float]]) -> float | None:
    """histogram_quantile of QUANTILE over (upper bound, cumulative count), bounds ascending."""
    total = counts[-1][1]
    if total <= 0:
        return None
    rank, lower, below = QUANTILE * total, 0.0, 0.0
    for upper, count in counts:
        if count >= rank:
            return (
                lower
                if upper == float("inf")
                else lower + (upper - lower) * (rank - below) / (count - below)
            )
        lower, below = upper, count
    return None


@pytest.mark.parametrize(
    "name, family",
    [
        ("time_to_first_token_p99", "vllm:time_to_first_token_seconds"),
        ("request_queue_time_p99", "vllm:request_queue_time_seconds"),
    ],
)
def test_p99_matches_a_brute_force_histogram_quantile(name: str, family: str) -> None:
    points = dict(_series(name).points)
    checked = 0
    for t, _ in _scrapes()[::9]:
        expected = _brute_quantile(t, family)
        if expected is None:
            assert _iso(t) not in points
            continue
        assert points[_iso(t)] == pytest.approx(expected, rel=1e-5), _iso(t)
        checked += 1
    assert checked >= 10


# Two replicas of two engines each, one engine restarting: cumulative bucket counts (le 0.1,
# 0.5, 1, +Inf) per replica, engine and scrape, scrapes 10 s apart (a 60 s window).
_BOUNDS = ("0.1", "0.5", "1", "+Inf")
_STEP_S, _SCRAPES, _RESTART_AT = 10, 20, 12


def _engine_counts(replica: str, engine: str, i: int) -> list[int]:
    """Cumulative counts per bound at scrape i; replica a's engine 1 restarts at scrape 12.

    Each engine adds its own mix each scrape (engine 0 of a fast, engine 1 of a slow), so
    a replica's quantile is neither engine's: only their sum gives it.
    """
    mixes = {
        ("a", "0"): lambda j: [4 + j % 3, 1, 0, 0],
        ("a", "1"): lambda j: [0, 1 + j % 2, 2, 0],
        ("b", "0"): lambda j: [1, 3, j % 4, 0],
        ("b", "1"): lambda j: [2, 0, 1 + j % 2, 0],
    }
    start = _RESTART_AT if (replica, engine) == ("a", "1") and i >= _RESTART_AT else 0
    totals = [0] * len(_BOUNDS)
    for j in range(start + 1, i + 1):
        totals = [t + n for t, n in zip(totals, mixes[replica, engine](j), strict=True)]
    return list(itertools.accumulate(totals))


def _write_engine_scrapes(folder: Path) -> list[float]:
    family = "vllm:request_queue_time_seconds"
    times = [1_780_000_000.0 + _STEP_S * i for i in range(_SCRAPES)]
    (folder / "metrics").mkdir()
    for i, t in enumerate(times):
        lines = [f"# TYPE {family} histogram"]
        for replica, engine in itertools.product("ab", "01"):
            labels = f'instance="{replica}",engine="{engine}",model_name="m"'
            for le, count in zip(_BOUNDS, _engine_counts(replica, engine, i), strict=True):
                lines.append(f'{family}_bucket{{{labels},le="{le}"}} {count}')
        (folder / "metrics" / f"{t:.0f}.prom").write_text("\n".join(lines) + "\n")
    return times


def _brute_engines_p99(replica: str, i: int) -> float | None:
    """The window's increases, engines added up, then histogram_quantile (as Prometheus)."""
    window = max(MIN_QUANTILE_WINDOW_S, 4 * _STEP_S)
    counts = [0.0] * len(_BOUNDS)
    for engine in "01":
        for j in range(1, i + 1):
            if _STEP_S * (i - j) > window:
                continue
            now, then = _engine_counts(replica, engine, j), _engine_counts(replica, engine, j - 1)
            for k in range(len(_BOUNDS)):
                counts[k] += now[k] - then[k] if now[k] >= then[k] else now[k]
    return _interpolated_p99([(float(le), c) for le, c in zip(_BOUNDS, counts, strict=True)])


def test_p99_adds_up_each_replicas_engines_and_survives_a_restart(tmp_path: Path) -> None:
    times = _write_engine_scrapes(tmp_path)
    d = analyze(AnalyzeOptions(incident=tmp_path)).diagnosis
    charted = {s.replica: dict(s.points) for s in d.series if s.name == "request_queue_time_p99"}
    assert set(charted) == {"a", "b"}
    for replica, i in itertools.product("ab", range(_SCRAPES)):
        expected = _brute_engines_p99(replica, i)
        if expected is None:
            assert _iso(times[i]) not in charted[replica]
        else:
            assert charted[replica][_iso(times[i])] == pytest.approx(expected, rel=1e-5)
    assert len(charted["a"]) == len(charted["b"]) == _SCRAPES - 1  # the first has no increase


def test_healthy_run_has_no_window() -> None:
    d = fixture_diagnosis("vllm-a-healthy")
    assert d.window is None
    assert max(v for _, v in _series("num_requests_waiting", "vllm-a-healthy").points) == 0


def test_stats_lines_stand_in_without_metrics(tmp_path: Path) -> None:
    shutil.copy(SATURATION / "server.log", tmp_path / "server.log")
    d = analyze(AnalyzeOptions(incident=tmp_path)).diagnosis
    by_name = {s.name: s for s in d.series}
    usage = by_name["kv_cache_usage"]
    assert usage.source == "stats lines of server.log"
    assert len(usage.points) == 17  # NOTES.md: 17 stats lines
    assert usage.points[0] == ("2026-11-29T13:35:11.000", 95.5)  # server.log:167
    assert "request_queue_time_p99" not in by_name  # histograms exist only in /metrics
    assert d.window is not None and d.window[0] == "2026-11-29T13:35:11.000"


def _seconds(n: int) -> list[datetime]:
    start = datetime(2026, 1, 1)
    return [start + timedelta(seconds=i) for i in range(n)]


def _downsample(frame: pl.DataFrame, how: str) -> pl.DataFrame:
    con = duckdb.connect()
    con.register("frame", frame)
    return con.sql(downsampled("SELECT * FROM frame", how, max_points=500)).pl()


def test_downsample_keeps_peaks_and_bounds_points() -> None:
    n = 5000
    values = [float(i % 97) for i in range(n)]
    values[2345] = 1e6
    frame = pl.DataFrame(
        {
            "replica": ["a"] * n + ["b"] * 10,
            "ts": _seconds(n) + _seconds(10),
            "value": values + [1.0] * 10,
        }
    )
    small = _downsample(frame, "max")
    a = small.filter(pl.col("replica") == "a")
    assert 0 < a.height <= 500
    assert a["value"].max() == 1e6  # the one spike survives
    assert small.filter(pl.col("replica") == "b").height == 10  # short series untouched
    mean = _downsample(frame, "mean").filter(pl.col("replica") == "a")
    assert mean["value"].max() < 1e6  # rates average instead


def test_the_window_read_with_the_chart_is_the_full_resolution_span() -> None:
    """hot_first / hot_last come from the rows of each bucket, not its first time: a
    downsampled chart's bucket starts before the first hot second and ends after the last."""
    n = 5000
    hot = {1234, 1300, 4011}  # the only seconds at or above 90 %, inside buckets of ten
    values = [95.0 if i in hot else 50.0 for i in range(n)]
    frame = pl.DataFrame({"replica": ["a"] * n, "ts": _seconds(n), "value": values})
    con = duckdb.connect()
    con.register("frame", frame)
    small = con.sql(downsampled("SELECT * FROM frame", "max", 500, hot="value >= 90.0")).pl()
    assert small.height <= 500
    assert not small.filter(pl.col("ts") == _seconds(n)[1234]).height  # not a bucket start
    none = pl.lit(None, pl.Datetime("us"))
    quiet = small.with_columns(none.alias("hot_first"), none.alias("hot_last"))
    first, last = (
        t.strftime("%Y-%m-%dT%H:%M:%S.000") for t in (_seconds(n)[1234], _seconds(n)[4011])
    )
    assert incident_window([small, quiet]) == (first, last)
    assert incident_window([quiet]) is None


def test_the_busiest_replicas_are_charted_first_by_waiting_then_usage() -> None:
    def s(name: str, replica: str, *values: float) -> Series:
        points = tuple((f"2026-11-29T12:00:0{i}.000", v) for i, v in enumerate(values))
        return Series(name, "", replica, points, "metrics")

    series = [
        s("kv_cache_usage", "quiet", 0.2),
        s("kv_cache_usage", "full", 0.99),
        s("num_requests_waiting", "full", 0, 0),
        s("kv_cache_usage", "queued", 0.5),
        s("num_requests_waiting", "queued", 0, 7, 2),
        s("prompt_throughput", "no-load-measure", 10.0),
    ]
    assert busiest_replicas(series) == ["queued", "full", "quiet", "no-load-measure"]
    assert busiest_replicas(series, limit=2) == ["queued", "full"]


def test_a_fleet_charts_its_busiest_replicas_as_if_all_were_charted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_CHARTED_REPLICAS, the series that do not rank replicas are read for the
    charted replicas only: the same points as reading every replica and keeping those."""
    scrapes = sorted((SATURATION / "metrics").glob("*.prom"), key=lambda p: float(p.stem))
    for k in range(10):  # ten replicas (a folder with a server log each), different minutes
        folder = tmp_path / f"replica-{k}"
        folder.mkdir()
        shutil.copy(SATURATION / "server.log", folder / "server.log")
        for path in scrapes[k * 12 : k * 12 + 60]:
            shutil.copy(path, folder / path.name)
    charted = analyze(AnalyzeOptions(incident=tmp_path)).diagnosis.series
    monkeypatch.setattr(series_module, "_fleet_charted", lambda ranking: None)
    everyone = analyze(AnalyzeOptions(incident=tmp_path)).diagnosis.series
    assert charted == everyone
    assert len({s.replica for s in charted}) == 8
    assert {s.name for s in charted} >= {"num_requests_running", "time_to_first_token_p99"}
