"""Counter increases and rates, histogram quantiles: against brute force and raw scrapes."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.domain import counters, histograms
from tests.conftest import FIXTURES
from tests.metric_support import raw_samples

T0 = datetime(2026, 11, 29, 13, 0, 0)


def reference_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """PromQL's bucketQuantile, written out as plainly as possible (cumulative buckets)."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for le, count in buckets:
        merged[le] = merged.get(le, 0.0) + count
    bounds = sorted(merged)
    if not bounds or bounds[-1] != math.inf:
        return math.nan
    counts, top = [], -math.inf
    for le in bounds:
        top = max(top, merged[le])
        counts.append(top)
    if len(bounds) < 2 or counts[-1] == 0:
        return math.nan
    rank = q * counts[-1]
    b = len(bounds) - 1
    for i in range(len(bounds) - 1):
        if counts[i] >= rank:
            b = i
            break
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, count = 0.0, counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    # Go's float division: 0/0 is NaN (q = 0 with an empty first bucket), not an error.
    fraction = rank / count if count else math.nan
    return start + (bounds[b] - start) * fraction


def _bucket_rows(buckets: list[tuple[float, float]], at: datetime, **labels: str) -> list[dict]:
    return [
        {"replica": "r", "engine": "0", "series": "{}", "ts": at, "le": le, "value": c, **labels}
        for le, c in buckets
    ]


def _cumulative(observations: list[float], bounds: list[float]) -> list[tuple[float, float]]:
    return [(le, float(sum(o <= le for o in observations))) for le in [*bounds, math.inf]]


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


BOUNDS = st.lists(
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), min_size=1, max_size=12
).map(lambda xs: sorted(set(xs)))
OBSERVATIONS = st.lists(st.floats(-1.5e3, 1.5e3, allow_nan=False), max_size=200)
QS = st.lists(st.floats(0, 1), min_size=1, max_size=4, unique=True)


@settings(max_examples=200, deadline=None)
@given(BOUNDS, OBSERVATIONS, QS)
def test_quantiles_match_brute_force(
    bounds: list[float], obs: list[float], qs: list[float]
) -> None:
    buckets = _cumulative(obs, bounds)
    frame = pl.DataFrame(_bucket_rows(buckets, T0))
    got = histograms.histogram_quantiles(frame, quantiles=qs)
    assert got.height == 1 and got["count"][0] == len(obs)
    for q in qs:
        value = got[histograms.quantile_column(q)][0]
        assert _close(value, reference_quantile(q, buckets)), (q, value)
        if obs and q > 0:
            # The estimate lies in the bucket that holds the true rank-th observation.
            kth = sorted(obs)[max(0, math.ceil(q * len(obs)) - 1)]
            upper = min(le for le in [*bounds, math.inf] if kth <= le)
            lower = max((le for le in bounds if le < kth), default=min(0.0, upper))
            if upper == math.inf:
                assert value == bounds[-1]
            else:
                assert lower - 1e-9 <= value <= upper + 1e-9, (q, kth, lower, upper, value)


def test_quantile_special_cases() -> None:
    def one(buckets: list[tuple[float, float]], q: float) -> float:
        frame = pl.DataFrame(_bucket_rows(buckets, T0))
        return float(
            histograms.histogram_quantiles(frame, quantiles=(q,))[histograms.quantile_column(q)][0]
        )

    assert math.isnan(one([(1.0, 5.0), (2.0, 9.0)], 0.5))  # no +Inf bucket
    assert math.isnan(one([(1.0, 0.0), (math.inf, 0.0)], 0.5))  # no observations
    assert math.isnan(one([(math.inf, 4.0)], 0.5))  # a single bucket
    assert one([(1.0, 1.0), (2.0, 1.0), (math.inf, 10.0)], 0.9) == 2.0  # rank in +Inf
    assert one([(-1.0, 5.0), (1.0, 6.0), (math.inf, 6.0)], 0.2) == -1.0  # non-positive first
    # One series sampled twice at one time: le=1 rose by 0, +Inf (alone) counts 8.
    assert one([(1.0, 4.0), (1.0, 4.0), (math.inf, 8.0)], 0.5) == 1.0
    assert one([(1.0, 8.0), (2.0, 4.0), (math.inf, 8.0)], 0.75) == 0.75  # forced monotonic
    assert one([(1.0, 4.0), (math.inf, 4.0)], 1.5) == math.inf
    assert one([(1.0, 4.0), (math.inf, 4.0)], -0.5) == -math.inf


def test_whole_window_uses_increases_across_a_restart() -> None:
    bounds = [0.1, 1.0, 10.0]
    a, b = [0.05] * 3, [0.5, 5.0, 50.0]  # before the window, then inside it
    c, d = [0.2, 0.3], [7.0]  # after the restart
    rows = (
        _bucket_rows(_cumulative(a, bounds), T0)
        + _bucket_rows(_cumulative(a + b, bounds), T0 + timedelta(seconds=1))
        + _bucket_rows(_cumulative(c, bounds), T0 + timedelta(seconds=2))
        + _bucket_rows(_cumulative(c + d, bounds), T0 + timedelta(seconds=3))
    )
    got = histograms.histogram_quantiles(pl.DataFrame(rows), quantiles=(0.5, 0.9))
    window = _cumulative(b + c + d, bounds)
    assert got["count"][0] == 6
    assert got["first_ts"][0] == T0 and got["last_ts"][0] == T0 + timedelta(seconds=3)
    for q in (0.5, 0.9):
        assert _close(got[histograms.quantile_column(q)][0], reference_quantile(q, window))


def test_rolling_window_quantiles_use_only_recent_observations() -> None:
    bounds = [1.0, 2.0, 4.0]
    seen: list[float] = []
    rows = []
    batches = [[0.5], [0.5, 1.5], [3.0], [3.5, 3.9], [1.2]]
    for i, batch in enumerate(batches):
        seen += batch
        rows += _bucket_rows(_cumulative(seen, bounds), T0 + timedelta(seconds=10 * i))
    got = histograms.histogram_quantiles(
        pl.DataFrame(rows), quantiles=(0.5,), window=timedelta(seconds=25)
    )
    assert got["ts"].to_list() == [T0 + timedelta(seconds=10 * i) for i in range(5)]
    for i in range(1, 5):
        recent = [o for j in range(max(1, i - 2), i + 1) for o in batches[j]]  # (t-25 s, t]
        assert got["count"][i] == len(recent)
        assert _close(got["p50"][i], reference_quantile(0.5, _cumulative(recent, bounds)))
    assert got["count"][0] == 0 and math.isnan(got["p50"][0])


def _counter(values: list[float | None], engine: str = "0", step: int = 10) -> list[dict]:
    return [
        {
            "replica": "r",
            "engine": engine,
            "series": "{}",
            "ts": T0 + timedelta(seconds=step * i),
            "value": v,
            "source_path": "m",
            "source_line": i + 1,
        }
        for i, v in enumerate(values)
    ]


def test_counter_increase_counts_a_reset_in_full() -> None:
    frame = pl.DataFrame(_counter([0, 5, 10, 2, 4, math.nan, 9]))
    totals = counters.counter_totals(frame)
    assert totals["increase"][0] == 5 + 5 + 2 + 2 + 5
    assert totals["resets"][0] == 1 and totals["samples"][0] == 6
    assert totals["rate"][0] == pytest.approx(19 / 60)
    deltas = counters.counter_deltas(frame)
    assert deltas["increase"].to_list() == [None, 5, 5, 2, 2, 5]
    assert deltas["reset"].to_list() == [False, False, False, True, False, False]


def test_counter_groups_by_series_and_sums_on_request() -> None:
    frame = pl.DataFrame(_counter([1, 4, 9]) + _counter([100, 110, 130], engine="1"))
    per_engine = counters.counter_totals(frame).sort("engine")
    assert per_engine["increase"].to_list() == [8, 30]
    per_replica = counters.counter_totals(frame, by=("replica",))
    assert per_replica["increase"].to_list() == [38]
    assert counters.counter_increase(frame) == 38
    assert counters.counter_increase(pl.DataFrame(_counter([7]))) == 7  # one sample: since start


def test_counter_rate_over_a_trailing_window() -> None:
    frame = pl.DataFrame(_counter([0, 10, 30, 30, 70], step=10))
    rated = counters.counter_rate(frame, timedelta(seconds=20))
    assert rated["increase"].to_list() == [0, 10, 30, 20, 40]
    assert rated["rate"].to_list()[1:] == [1.0, 1.5, 1.0, 2.0]


def test_real_ttft_quantiles_match_the_raw_scrapes() -> None:
    files = sorted((FIXTURES / "vllm-b-saturation" / "incident" / "metrics").glob("*.prom"))
    name = "vllm:time_to_first_token_seconds_bucket"
    first, last = raw_samples(files[0]), raw_samples(files[-1])
    buckets = []
    for (metric, labels), (_, value) in last.items():
        if metric == name:
            le = re.search(r'le="([^"]+)"', labels)
            assert le is not None
            bound = math.inf if le.group(1) == "+Inf" else float(le.group(1))
            buckets.append((bound, value - first[(metric, labels)][1]))
    from tests.metric_support import ingest

    stored = ingest(files[0].parent).table("metric_samples")
    got = histograms.histogram_quantiles(stored.filter(pl.col("metric") == "time_to_first_token"))
    assert got.height == 1 and got["count"][0] == 36
    for q in histograms.QUANTILES:
        assert _close(got[histograms.quantile_column(q)][0], reference_quantile(q, buckets))
