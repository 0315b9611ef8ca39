"""Load points are numbers and codes: row ids and counts in 32 bits while they fit, else
64, the replica a category; the stats lines' points leave DuckDB in that form."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from kvdiag.analyzer import model as facts
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.load_picture import COLUMNS, _compact, load_points
from kvdiag.analyzer.store.database import Store
from kvdiag.rules.base import RuleContext
from kvdiag.rules.kv301_saturation import KvSaturation


def _points(row_ids: list[int], w_rows: list[int | None]) -> pl.DataFrame:
    n = len(row_ids)
    return pl.DataFrame(
        {
            "replica": ["r0"] * n,
            "ts": list(range(n)),
            "usage": [0.5] * n,
            "waiting": [1.0] * n,
            "running": [2.0] * n,
            "deferred": [None] * n,
            "origin": ["log"] * n,
            "row_id": row_ids,
            "w_row": w_rows,
        },
        schema_overrides={"row_id": pl.Int64, "w_row": pl.Int64},
    )


def test_row_ids_that_fit_32_bits_take_32_and_keep_their_values() -> None:
    got = _compact(_points([0, 7, 2**32 - 1], [None, None, None]))
    assert got.columns == COLUMNS
    assert got.schema["row_id"] == pl.UInt32 and got.schema["w_row"] == pl.UInt32
    assert got["row_id"].to_list() == [0, 7, 2**32 - 1]
    assert got["w_row"].null_count() == 3


def test_a_row_id_past_32_bits_keeps_its_column_64_bits_wide() -> None:
    got = _compact(_points([1, 2**32], [5, 6]))
    assert got.schema["row_id"] == pl.Int64 and got.schema["w_row"] == pl.UInt32
    assert got["row_id"].to_list() == [1, 2**32]


def _log_store(rows: list[dict[str, object]]) -> Store:
    store = Store()
    frame = pl.DataFrame(
        [
            {
                "source_path": "vllm.log",
                "source_line": i + 1,
                "raw": f"stats line {i + 1}",
                "ts": datetime(2025, 7, 28, 6, 40, i),
                **row,
            }
            for i, row in enumerate(rows)
        ],
        schema_overrides={"ts": pl.Datetime("us"), "waiting": pl.Int64, "running": pl.Int64},
    )
    store.append("log_stats", frame)
    return store


def _read_points(store: Store) -> pl.DataFrame:
    reader = store.reader
    ctx = RuleContext(KvSaturation(), Incident(reader, facts.establish(reader)), {})
    return load_points(ctx)


def test_log_points_leave_duckdb_compact_and_in_order_whatever_the_replica_names() -> None:
    # A replica is named by the input (a folder, a pod): quotes must not break the
    # ENUM type the query casts to, and its order is the names' order.
    names = ["pod-'b'", "pod-a", "ö-pod", "pod-a"]
    rows = [
        {"replica": name, "kv_usage_pct": 10.0 * (i + 1), "waiting": i, "running": 2 * i}
        for i, name in enumerate(names)
    ]
    rows.append({"replica": None, "kv_usage_pct": 5.0, "waiting": 1, "running": 1})
    store = _log_store(rows)
    try:
        got = _read_points(store)
    finally:
        store.discard()
    assert got.columns == COLUMNS
    assert got.schema["replica"] == pl.Categorical
    assert got.schema["waiting"] == pl.Int32 and got.schema["row_id"] == pl.UInt32
    assert got["replica"].to_list() == ["pod-'b'", "pod-a", "pod-a", "ö-pod", None]
    assert got["usage"].to_list() == pytest.approx([0.1, 0.2, 0.4, 0.3, 0.05])
    assert got["waiting"].to_list() == [0, 1, 3, 2, 1]
    assert got["running"].to_list() == [0, 2, 6, 4, 1]


def test_counts_past_32_bits_keep_their_values() -> None:
    # A hostile line can claim any count; the narrow type is only taken when all fit.
    big = 2**40
    rows = [
        {"replica": "r0", "kv_usage_pct": 50.0, "waiting": big, "running": 1},
        {"replica": "r0", "kv_usage_pct": 60.0, "waiting": 2, "running": 3},
    ]
    store = _log_store(rows)
    try:
        got = _read_points(store)
    finally:
        store.discard()
    assert got.schema["waiting"] == pl.Int64
    assert got["waiting"].to_list() == [big, 2]
