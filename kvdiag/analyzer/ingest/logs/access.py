"""HTTP access lines below status 400, counted per key in memory bounded by the keys seen.

A big log is mostly access lines (`GET /metrics 200`). A store row each would grow with
the file and add nothing the rules read (they read rejections, 429 and 503, which keep a
row each in log_http). So they are counted per (process, method, path, status), with the
first and last line and the first line's text as evidence (table log_http_counts).
"""

from __future__ import annotations

import polars as pl

from kvdiag.analyzer.ingest.logs.parse import MAX_STORED_LINE

KEYS = ("process", "method", "path", "status")


def count_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """Access rows of the full parse (one per line), counted like the fast lane counts."""
    return rows.group_by(*KEYS).agg(
        pl.len().cast(pl.Int64).alias("count"),
        pl.col("line_no").min().alias("first"),
        pl.col("line_no").max().alias("last"),
        pl.col("raw").sort_by("line_no").first(),
    )


class AccessBook:
    """The counts of one file so far: one row per key, folded batch by batch."""

    def __init__(self) -> None:
        self._rows: pl.DataFrame | None = None

    def add(self, counts: pl.DataFrame) -> None:
        """Fold in a batch's counts (KEYS, count, first, last, raw; `process` optional)."""
        if counts.is_empty():
            return
        if "process" not in counts.columns:
            counts = counts.with_columns(pl.lit(None, pl.String).alias("process"))
        parts = [counts] if self._rows is None else [self._rows, counts]
        folded = (
            pl.concat(parts, how="diagonal_relaxed")
            .sort("first")
            .group_by(*KEYS, maintain_order=True)
            .agg(
                pl.col("count").sum(),
                pl.col("first").min(),
                pl.col("last").max(),
                pl.col("raw").first(),
            )
        )
        # A string taken from a batch can share that batch's whole text buffer: copying
        # the few rows kept lets each batch's text go when the batch is done (without the
        # copy, every batch of the log stayed alive until its end).
        self._rows = pl.DataFrame(folded.to_dict(as_series=False), schema=folded.schema)

    def table(self, rel: str, replica: str) -> pl.DataFrame | None:
        """The file's log_http_counts rows, or None when it had no such line."""
        if self._rows is None:
            return None
        return self._rows.select(
            pl.lit(rel).alias("source_path"),
            pl.col("first").alias("source_line"),
            pl.col("raw").str.slice(0, MAX_STORED_LINE).alias("raw"),
            pl.lit(replica).alias("replica"),
            "process",
            "method",
            "path",
            pl.col("status").cast(pl.Int32),
            "count",
            pl.col("last").alias("last_line"),
        )
