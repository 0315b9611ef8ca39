"""Counter increases across restarts: the polars helpers, the domain's SQL text and the
rules' queries on a real store, against increases summed by hand."""

from __future__ import annotations

import itertools
import math
from datetime import datetime, timedelta

import duckdb
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.model import queries
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.store.database import Store
from kvdiag.domain import counters
from kvdiag.rules.base import RuleContext
from kvdiag.rules.kv301_saturation import KvSaturation

T0 = datetime(2026, 11, 29, 13, 0, 0)
_DUCKDB = duckdb.connect()  # one for every example: a connection costs more than a query
NAME = "vllm:num_preemptions_total"


def hand_increase(values: list[float]) -> float:
    """Prometheus' increase, step by step: a drop is a restart from zero."""
    kept = [v for v in values if not math.isnan(v)]
    if len(kept) == 1:
        return kept[0]  # no window: the count since the process started
    steps = [b - a if b >= a else b for a, b in itertools.pairwise(kept)]
    return float(sum(steps))


def counter_rows(values: list[float], replica: str = "r", engine: str = "0") -> list[dict]:
    return [
        {
            "source_path": f"metrics/{i}.prom",
            "source_line": 1 + int(engine),
            "raw": f'{NAME}{{engine="{engine}"}} {v}',
            "replica": replica,
            "ts": T0 + timedelta(seconds=i),
            "metric": "num_preemptions",
            "name": NAME,
            "suffix": "total",
            "engine": engine,
            "series": f'{{"engine": "{engine}"}}',
            "value": v,
        }
        for i, v in enumerate(values)
    ]


def test_a_reset_mid_window_counts_the_restart_in_full() -> None:
    """10, 20, 30, restart, 5, 15: 35, where last minus first says 5."""
    values = [10.0, 20.0, 30.0, 5.0, 15.0]
    assert hand_increase(values) == 35
    rows = counter_rows(values)
    assert counters.counter_increase(pl.DataFrame(rows)) == 35
    store = Store()
    store.append("metric_samples", pl.DataFrame(rows))
    try:
        ctx = RuleContext(KvSaturation(), Incident(store.reader, {}), {})
        assert queries.counter_total(ctx, "num_preemptions") == 35
        assert queries.counter_total(ctx, "num_preemptions", "r") == 35
    finally:
        store.discard()


VALUES = st.lists(
    st.one_of(st.floats(0, 1e6, allow_nan=False), st.just(math.nan)), min_size=1, max_size=30
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("ab"), st.sampled_from("01"), VALUES), min_size=1, max_size=4
    )
)
def test_polars_and_sql_increases_equal_the_hand_sum(
    series: list[tuple[str, str, list[float]]],
) -> None:
    """Per series (replica, engine) and per replica, with resets, lone samples and NaN."""
    unique = {(r, e): v for r, e, v in series}  # one value list per series
    rows = [row for (r, e), v in unique.items() for row in counter_rows(v, r, e)]
    expected = {
        key: hand_increase(v) for key, v in unique.items() if any(not math.isnan(x) for x in v)
    }
    frame = pl.DataFrame(rows, schema_overrides={"value": pl.Float64})
    totals = counters.counter_totals(frame)
    got = {(r, e): x for r, e, x in totals.select("replica", "engine", "increase").iter_rows()}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert math.isclose(got[key], value, rel_tol=1e-12, abs_tol=1e-6)

    keyed = frame.with_columns((pl.col("replica") + pl.col("engine")).alias("k"))
    _DUCKDB.register("samples", keyed)
    sql = counters.series_increase_sql("SELECT k, ts, value FROM samples", "k")
    by_sql = dict(_DUCKDB.sql(sql).fetchall())
    _DUCKDB.unregister("samples")
    assert by_sql.keys() == {r + e for r, e in expected}
    for (r, e), value in expected.items():
        assert math.isclose(by_sql[r + e], value, rel_tol=1e-12, abs_tol=1e-6)

    per_replica = counters.counter_totals(frame, by=("replica",))
    for replica, total in per_replica.select("replica", "increase").iter_rows():
        mine = sum(v for (r, _), v in expected.items() if r == replica)
        assert math.isclose(total, mine, rel_tol=1e-12, abs_tol=1e-6)
