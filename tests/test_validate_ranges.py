"""Validation reads each column's min and max first and runs the row-by-row range query only
where they leave the range: it must flag exactly the rows that query flags on its own."""

from __future__ import annotations

import math

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.store import validate
from kvdiag.analyzer.store.database import Store

# kv_usage_pct's declared range is [0, 100]; running's [0, 1e7] (plausible.toml).
_USAGE = st.one_of(
    st.sampled_from([0.0, 100.0, -0.0, 100.0000001, -1e-9, math.nan, math.inf, -math.inf]),
    st.floats(-10, 110),
    st.none(),
)
_RUNNING = st.one_of(
    st.sampled_from([0, 10_000_000, 10_000_001, -1]), st.integers(0, 50), st.none()
)


def _store(usage: list[float | None], running: list[int | None]) -> Store:
    n = len(usage)
    store = Store()
    store.append(
        "log_stats",
        pl.DataFrame(
            {
                "source_path": ["server.log"] * n,
                "source_line": list(range(1, n + 1)),
                "raw": [f"line {i}" for i in range(n)],
                "kv_usage_pct": usage,
                "running": running,
            },
            schema_overrides={"kv_usage_pct": pl.Float64, "running": pl.Int64},
        ),
    )
    return store


def _row_by_row(store: Store, column: str, bounds: tuple[float, float]) -> list[int]:
    query = validate._column_query("log_stats", column, bounds)
    return sorted(store.reader.sql(query)["source_line"].to_list())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_USAGE, _RUNNING), min_size=1, max_size=12))
def test_the_min_max_prefilter_flags_what_the_row_queries_flag(
    rows: list[tuple[float | None, int | None]],
) -> None:
    store = _store([u for u, _ in rows], [r for _, r in rows])
    try:
        flagged = validate.implausible_rows(store.reader)
        for column, bounds in (("kv_usage_pct", (0.0, 100.0)), ("running", (0.0, 1e7))):
            got = flagged.filter(pl.col("column_name") == column)["source_line"].sort().to_list()
            assert got == _row_by_row(store, column, bounds), column
    finally:
        store.discard()


def test_a_column_within_its_range_is_not_read_row_by_row() -> None:
    store = _store([0.0, 55.5, 100.0], [0, 3, 10_000_000])
    try:
        ranged = [("log_stats", "kv_usage_pct", (0.0, 100.0)), ("log_stats", "running", (0.0, 1e7))]
        assert validate._out_of_range(store.reader, ranged) == []
        assert validate.implausible_rows(store.reader).is_empty()
    finally:
        store.discard()
