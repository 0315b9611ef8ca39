"""Load points are numbers and codes: row ids in 32 bits while they fit, else 64."""

from __future__ import annotations

import polars as pl

from kvdiag.rules.load import COLUMNS, _compact


def _points(row_ids: list[int], w_rows: list[int | None]) -> pl.DataFrame:
    n = len(row_ids)
    return pl.DataFrame(
        {
            "replica": ["r0"] * n,
            "ts": list(range(n)),
            "usage": [0.5] * n,
            "waiting": [1.0] * n,
            "running": [2.0] * n,
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
