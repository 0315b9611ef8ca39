"""The load points of a fleet: both sources in one frame, each replica's rows together, and
the split per replica a set of slices that read as the rows grouped by replica would."""

from __future__ import annotations

import duckdb
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.model.quantities.load_picture import combined
from kvdiag.analyzer.model.queries import split_by_replica

_NAMES = st.sampled_from(["replica-a", "replica-b", "replica-c", None])


def _grouped(frame: pl.DataFrame) -> dict[object, list[dict[str, object]]]:
    """The rows of each replica in frame order: what a split must give, by a plain reading."""
    out: dict[object, list[dict[str, object]]] = {}
    for row in frame.to_dicts():
        out.setdefault(row["replica"], []).append(row)
    return out


def _points(replicas: list[str | None], counts: pl.DataType, start: int) -> pl.DataFrame:
    n = len(replicas)
    return pl.DataFrame(
        {
            "replica": replicas,
            "usage": [i / max(n, 1) for i in range(n)],
            "waiting": pl.Series([i % 7 for i in range(n)]).cast(counts),
            "running": pl.Series([i % 5 for i in range(n)]).cast(counts),
            "deferred": pl.Series([None] * n, dtype=counts),
            "row_id": pl.Series(range(start, start + n), dtype=pl.UInt32),
        }
    ).with_columns(pl.col("replica").cast(pl.Categorical))


@settings(max_examples=60, deadline=None)
@given(st.lists(_NAMES, min_size=1, max_size=40), st.booleans())
def test_a_split_reads_as_the_rows_grouped_by_replica(
    names: list[str | None], ordered: bool
) -> None:
    if ordered:  # together, as the combined points are: slices
        names = sorted(names, key=lambda r: (r is None, r))
    frame = _points(names, pl.Int32, 0)
    parts = split_by_replica(frame)
    want = _grouped(frame)
    assert list(parts) == sorted(want, key=lambda r: (r is None, r))
    assert {k: v.to_dicts() for k, v in parts.items()} == want


@settings(max_examples=40, deadline=None)
@given(st.lists(_NAMES, min_size=1, max_size=30), st.lists(_NAMES, min_size=1, max_size=30))
def test_both_sources_come_together_replica_by_replica(
    metric_names: list[str | None], log_names: list[str | None]
) -> None:
    def ordered(names: list[str | None]) -> list[str | None]:
        return sorted(names, key=lambda r: (r is None, r))

    metrics = _points(ordered(metric_names), pl.Float64, 1000)
    log = _points(ordered(log_names), pl.Int32, 0)
    both = combined(metrics, log)
    # Whole gauge values take the log's 4-byte type; nothing else changes.
    assert both.schema["waiting"] == pl.Int32 and both.schema["running"] == pl.Int32
    runs = both.select(pl.col("replica").rle()).unnest("replica")["value"].to_list()
    assert len(runs) == len(set(runs))  # each replica's rows together
    plain = pl.concat([metrics, log], how="vertical_relaxed")
    want = {
        k: [{**r, "waiting": int(r["waiting"]), "running": int(r["running"])} for r in rows]
        for k, rows in _grouped(plain).items()
    }
    assert {k: v.to_dicts() for k, v in split_by_replica(both).items()} == want


def test_fractional_gauges_keep_their_type() -> None:
    """An export averaged over a step gives fractional counts: they stay floats, exactly."""
    metrics = _points(["a", "a", "b"], pl.Float64, 10).with_columns(
        pl.Series("waiting", [0.5, 1.0, 2.25])
    )
    log = _points(["a", "b"], pl.Int32, 0)
    both = combined(metrics, log)
    assert both.schema["waiting"] == pl.Float64
    assert both.schema["running"] == pl.Int32
    assert both.filter(pl.col("replica") == "a")["waiting"].to_list() == [0.5, 1.0, 0.0]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(0, 1, allow_nan=False), st.sampled_from([0.0, 0.5, 1.0])),
        min_size=1,
        max_size=80,
    )
)
def test_the_fleet_p95_is_duckdb_s_quantile_disc(usage: list[float]) -> None:
    """The fleet view takes each replica's p95 from the load points in polars: the same
    value DuckDB's quantile_disc gave when it was computed there."""
    frame = pl.DataFrame({"u": usage})
    want = duckdb.sql("SELECT quantile_disc(u, 0.95) FROM frame").fetchall()[0][0]
    assert frame["u"].quantile(0.95, interpolation="equiprobable") == want
