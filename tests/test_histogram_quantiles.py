"""histogram_quantile in its three paths (the domain's polars function, its SQL text in the
charts, the rules' query) against a quantile computed from the raw observations, and
across a server restart inside the window."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

import duckdb
import polars as pl
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.model import queries
from kvdiag.analyzer.model.chart_series import QUANTILE, build_series
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.store.database import Store
from kvdiag.domain import counters, histograms
from kvdiag.rules.base import RuleContext
from kvdiag.rules.kv301_saturation import KvSaturation

T0 = datetime(2026, 11, 29, 13, 0, 0)
METRIC = "time_to_first_token"


def oracle_quantile(q: float, observations: Sequence[float], bounds: Sequence[float]) -> float:
    """PromQL's estimate by its definition, from the observations themselves.

    Each bucket's observations are spread evenly over it (from 0 to a positive first bound;
    a first bound <= 0 holds its own at the bound); the estimate is the smallest x at which
    that spread reaches rank q x n, found by bisection, or the highest finite bound when
    more than that lies above it. NaN without observations or without a finite bound.
    """
    if not observations or not bounds:
        return math.nan
    rank = q * len(observations)
    edges = [min(0.0, bounds[0]), *bounds]
    inside = [0] * len(bounds)
    for o in sorted(observations):
        for i, upper in enumerate(bounds):
            if o <= upper:
                inside[i] += 1
                break
    if sum(inside) < rank:
        return bounds[-1]

    def spread(x: float) -> float:
        total = 0.0
        for i, n in enumerate(inside):
            lower, upper = edges[i], edges[i + 1]
            if x >= upper:
                total += n
            elif x > lower:
                total += n * (x - lower) / (upper - lower)
        return total

    lo, hi = edges[0], bounds[-1]
    if spread(lo) >= rank:
        return lo
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if spread(mid) >= rank else (mid, hi)
    return hi


def cumulative(observations: Sequence[float], bounds: Sequence[float]) -> list[float]:
    """Prometheus' cumulative bucket counts, the +Inf bucket last."""
    return [float(sum(o <= le for o in observations)) for le in [*bounds, math.inf]]


def bucket_rows(
    counts: Sequence[float], bounds: Sequence[float], at: datetime, engine: str = "0"
) -> list[dict[str, object]]:
    """metric_samples rows of one scrape of the TTFT histogram."""
    rows = []
    for line, (le, c) in enumerate(zip([*bounds, math.inf], counts, strict=True), start=1):
        label = "+Inf" if le == math.inf else repr(le)
        name = "vllm:time_to_first_token_seconds_bucket"
        rows.append(
            {
                "source_path": f"metrics/{int(at.timestamp())}.prom",
                "source_line": line + 100 * int(engine),
                "raw": f'{name}{{engine="{engine}",le="{label}"}} {c}',
                "replica": "r",
                "ts": at,
                "metric": METRIC,
                "name": name,
                "suffix": "bucket",
                "engine": engine,
                "le": le,
                "series": f'{{"engine": "{engine}"}}',
                "value": c,
            }
        )
    return rows


_DUCKDB = duckdb.connect()  # one for every example: a connection costs more than a query


def sql_rows(query: str, buckets: pl.DataFrame) -> list[tuple]:
    """The rows of a query over `buckets` (a frame of cumulative counts, `c`)."""
    _DUCKDB.register("buckets", buckets)
    try:
        return _DUCKDB.sql(query).fetchall()
    finally:
        _DUCKDB.unregister("buckets")


def store_of(rows: list[dict[str, object]]) -> Store:
    store = Store()
    store.append("metric_samples", pl.DataFrame(rows, infer_schema_length=None))
    return store


def rule_context(store: Store) -> RuleContext:
    return RuleContext(KvSaturation(), Incident(store.reader, {}), {})


def close(got: float | None, expected: float, scale: float) -> bool:
    if math.isnan(expected):
        return got is None or math.isnan(got)
    return got is not None and abs(got - expected) <= 1e-7 * max(1.0, scale)


BOUNDS = st.lists(st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), max_size=10).map(
    lambda xs: sorted(set(xs))
)
OBSERVATIONS = st.lists(st.floats(-1.5e3, 1.5e3, allow_nan=False), max_size=120)
Q = st.floats(0, 1, exclude_min=True)


@settings(max_examples=150, deadline=None)
@given(BOUNDS, OBSERVATIONS, OBSERVATIONS, st.lists(st.booleans(), max_size=120), Q)
def test_polars_and_sql_quantiles_equal_the_observations_oracle(
    bounds: list[float], before: list[float], window: list[float], on_1: list[bool], q: float
) -> None:
    """Observations before the window are in both scrapes; the window's are split between
    two engines, which the replica's quantile adds up."""
    on_engine_1 = [*on_1, *[False] * len(window)][: len(window)]
    split = [
        [o for o, one in zip(window, on_engine_1, strict=True) if one == e] for e in (False, True)
    ]
    rows = []
    for engine, mine in zip("01", split, strict=True):
        first = before if engine == "0" else []
        rows += bucket_rows(cumulative(first, bounds), bounds, T0, engine)
        rows += bucket_rows(
            cumulative(first + mine, bounds), bounds, T0 + timedelta(seconds=10), engine
        )
    expected = oracle_quantile(q, window, bounds)
    scale = max(map(abs, bounds), default=1.0)

    frame = pl.DataFrame(rows)
    got = histograms.histogram_quantiles(frame, quantiles=(q,), by=("replica",))
    assert got["count"][0] == len(window)
    assert close(got[histograms.quantile_column(q)][0], expected, scale)

    increases = counters.counter_totals(frame, by=("replica",), extra=("le",))
    sql = histograms.bucket_quantile_sql(q, "SELECT * FROM buckets", ("replica",))
    counts = increases.select("replica", "le", pl.col("increase").alias("c"))
    ((count, value),) = sql_rows(f"SELECT count, value FROM ({sql})", counts)
    assert count == len(window) and close(value, expected, scale)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BOUNDS, OBSERVATIONS, OBSERVATIONS)
@example([-1.0, 1.0], [], [-3.0, -2.0])  # a first bound <= 0 holds the rank: the bound
@example([], [], [1.0])  # the +Inf bucket alone: no quantile
def test_the_charts_p99_equals_the_observations_oracle(
    bounds: list[float], before: list[float], window: list[float]
) -> None:
    """The whole chart query on a store: p99 over the trailing window at the second scrape."""
    later = T0 + timedelta(seconds=10)
    rows = bucket_rows(cumulative(before, bounds), bounds, T0)
    rows += bucket_rows(cumulative(before + window, bounds), bounds, later)
    store = store_of(rows)
    try:
        series, _ = build_series(store.reader)
    finally:
        store.discard()
    points = {p for s in series if s.name == "time_to_first_token_p99" for p in s.points}
    expected = oracle_quantile(QUANTILE, window, bounds)
    if math.isnan(expected):
        assert points == set()
        return
    stamp = later.strftime("%Y-%m-%dT%H:%M:%S.000")
    (value,) = [v for t, v in points if t == stamp]
    assert value == pytest.approx(expected, rel=1e-5, abs=1e-9)


ROWS = st.lists(
    st.tuples(
        st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 10.0, math.inf]),
        st.sampled_from([0.0, 1.0, 2.0, 3.0, 7.0, 20.0]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(ROWS, min_size=1, max_size=3), st.sampled_from([0.25, 0.5, 0.9, 0.99, 1.0]))
def test_sql_and_polars_interpolate_any_buckets_alike(
    histograms_rows: list[list[tuple[float, float]]], q: float
) -> None:
    """Whatever the rows: bounds repeated, counts falling, no +Inf bucket, bounds <= 0."""
    frame = pl.DataFrame(
        [{"g": g, "le": le, "count": c} for g, rows in enumerate(histograms_rows) for le, c in rows]
    )
    polars_side = histograms.bucket_quantiles(frame, ["g"], (q,))
    sql = histograms.bucket_quantile_sql(q, "SELECT * FROM buckets", ("g",))
    sql_side = {g: (c, v) for g, c, v in sql_rows(sql, frame.rename({"count": "c"}))}
    for g, count, value in polars_side.select("g", "count", histograms.quantile_column(q)).rows():
        assert sql_side[g][0] == count
        got = sql_side[g][1]
        assert (got is None and math.isnan(value)) or got == pytest.approx(value, rel=1e-12)


SPECIAL_CASES = [
    ([(1.0, 5.0), (2.0, 9.0)], 0.5, math.nan),  # no +Inf bucket
    ([(1.0, 0.0), (math.inf, 0.0)], 0.5, math.nan),  # no observations
    ([(math.inf, 4.0)], 0.5, math.nan),  # a single bucket
    ([(1.0, 1.0), (2.0, 1.0), (math.inf, 10.0)], 0.9, 2.0),  # the rank in +Inf
    ([(-1.0, 5.0), (1.0, 6.0), (math.inf, 6.0)], 0.2, -1.0),  # a first bound <= 0
    ([(1.0, 4.0), (1.0, 4.0), (math.inf, 8.0)], 0.5, 0.5),  # equal bounds merged: 8 <= 1
    ([(1.0, 8.0), (2.0, 4.0), (math.inf, 8.0)], 0.75, 0.75),  # counts made monotonic
    ([(2.0, 8.0), (1.0, 2.0), (math.inf, 8.0)], 0.5, 1 + 2 / 6),  # bounds sorted
]


@pytest.mark.parametrize("rows, q, expected", SPECIAL_CASES)
def test_promql_special_cases_in_polars_and_sql(
    rows: list[tuple[float, float]], q: float, expected: float
) -> None:
    frame = pl.DataFrame({"g": 0, "le": [le for le, _ in rows], "count": [c for _, c in rows]})
    by_polars = histograms.bucket_quantile(q, frame.select("le", "count"))
    sql = histograms.bucket_quantile_sql(q, "SELECT * FROM buckets", ("g",))
    ((by_sql,),) = sql_rows(f"SELECT value FROM ({sql})", frame.rename({"count": "c"}))
    if math.isnan(expected):
        assert math.isnan(by_polars) and by_sql is None
    else:
        assert by_polars == pytest.approx(expected) and by_sql == pytest.approx(expected)


def test_oracle_on_hand_worked_histograms() -> None:
    # 10 observations, ranks 9.9 (p99): in (1, 2], 4 of 5 in (1, 2] below -> 1 + 0.98
    assert oracle_quantile(0.99, [0.5] * 5 + [1.5] * 5, [1.0, 2.0]) == pytest.approx(1.98)
    assert oracle_quantile(0.5, [0.5] * 4, [1.0]) == pytest.approx(0.5)  # from 0 to 1
    assert oracle_quantile(0.9, [0.5, 3.0], [1.0, 2.0]) == 2.0  # the rank is in +Inf
    assert oracle_quantile(0.5, [-3.0, -2.0], [-1.0, 1.0]) == -1.0  # non-positive first
    assert math.isnan(oracle_quantile(0.5, [], [1.0]))
    assert math.isnan(oracle_quantile(0.5, [1.0], []))


@pytest.fixture
def restarted() -> Iterator[tuple[RuleContext, list[float], list[float]]]:
    """A histogram whose server restarted mid-window: slow requests before the restart,
    fast ones after it (last minus first sees only some of the fast ones)."""
    bounds = [0.5, 1.0, 5.0, 10.0]
    before, slow, fast1, fast2 = [0.2] * 10, [7.0] * 20, [0.3] * 5, [0.4, 0.6] * 5
    scrapes = [before, before + slow, fast1, fast1 + fast2]
    rows = []
    for i, seen in enumerate(scrapes):
        rows += bucket_rows(cumulative(seen, bounds), bounds, T0 + timedelta(seconds=10 * i))
    store = store_of(rows)
    try:
        yield rule_context(store), slow + fast1 + fast2, bounds
    finally:
        store.discard()


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
@pytest.mark.parametrize("replica", [None, "r"])
def test_quantile_across_a_restart_is_that_of_the_window_observations(
    restarted: tuple[RuleContext, list[float], list[float]], q: float, replica: str | None
) -> None:
    ctx, window, bounds = restarted
    got = queries.histogram_quantile(ctx, METRIC, q, replica)
    assert close(got, oracle_quantile(q, window, bounds), 10.0), (q, got)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(BOUNDS.filter(bool), OBSERVATIONS, OBSERVATIONS, OBSERVATIONS, OBSERVATIONS, Q)
@example([1.0, 5.0], [0.5] * 4, [3.0] * 8, [0.5], [0.7] * 3, 0.9)
def test_rules_quantile_survives_a_restart(
    bounds: list[float],
    before: list[float],
    ahead: list[float],
    after: list[float],
    later: list[float],
    q: float,
) -> None:
    """Scrapes: `before`, + `ahead`, restart, `after`, + `later`; the window holds the last
    three batches. A restart that leaves some bucket higher than it was is invisible (to
    Prometheus too), so only restarts every non-empty bucket shows are drawn."""
    prev, restart = cumulative(before + ahead, bounds), cumulative(after, bounds)
    assume(not any(p and r >= p for p, r in zip(prev, restart, strict=True)))
    rows = []
    for i, seen in enumerate([before, before + ahead, after, after + later]):
        rows += bucket_rows(cumulative(seen, bounds), bounds, T0 + timedelta(seconds=10 * i))
    store = store_of(rows)
    try:
        got = queries.histogram_quantile(rule_context(store), METRIC, q)
    finally:
        store.discard()
    expected = oracle_quantile(q, ahead + after + later, bounds)
    assert close(got, expected, max(map(abs, bounds))), (got, expected)
