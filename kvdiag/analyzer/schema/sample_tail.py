"""A metric sample's line stored as what follows its series' head (metric_points.tail).

A scrape's sample line is ~100 bytes of which the value is a few, and its head
(`name{labels}`) is the same on every sample of the series: the store keeps the head once
(metric_series.head) and of each line only the rest, when the line starts with it. The
store cuts the lines of the batches it is given; the exposition parser cuts them itself,
once per distinct line, and says so with the `tail` column.
"""

from __future__ import annotations

import polars as pl

TAIL = "tail"


def cut_heads(frame: pl.DataFrame) -> pl.DataFrame:
    """`raw` without `head` where it starts with it, and `tail` saying so."""
    raw = pl.col("raw")
    stripped = frame.select(raw.str.strip_prefix(pl.col("head")).fill_null(raw))["raw"]
    # One pass over the text: a line that lost its (non-empty) head got shorter.
    tail = (stripped.str.len_bytes() < frame["raw"].str.len_bytes()).fill_null(False)
    return frame.with_columns(stripped.alias("raw"), tail.alias(TAIL))


def whole_line(head: pl.Expr) -> pl.Expr:
    """The line as read, from `raw` and `tail` (as the metric_samples view rebuilds it)."""
    return pl.when(pl.col(TAIL)).then(head + pl.col("raw")).otherwise(pl.col("raw"))
