"""Timestamps for log lines that print no year (`MM-DD HH:MM:SS`).

The year comes, in order of preference, from a container timestamp on the same line,
the `--year` option, an absolute time seen elsewhere in the incident folder (scrape file
names, scrape logs), or the file's modification time. Months that go backwards within a
file (12-31 -> 01-01) advance the year. The chosen source is reported per file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from kvdiag.analyzer.ingest.base import IngestContext


@dataclass
class YearState:
    """Year bookkeeping carried from batch to batch within one file."""

    base_year: int
    source: str
    last_month: int | None = None
    rollovers: int = 0
    used_container_year: bool = field(default=False)


def initial_year(ctx: IngestContext, path: Path, first_month: int | None) -> YearState:
    """Pick the base year for a file from the context, before its container stamps are seen."""
    if ctx.year is not None:
        return YearState(ctx.year, "--year option")
    if ctx.anchor is not None:
        return YearState(
            _near(ctx.anchor, first_month), f"{ctx.anchor_source} ({ctx.anchor.date()})"
        )
    mtime = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    return YearState(_near(mtime, first_month), "file modification time")


def _near(anchor: datetime, month: int | None) -> int:
    """The year that puts `month` closest to the anchor (a December log, a January anchor)."""
    if month is None:
        return anchor.year
    if month - anchor.month > 6:
        return anchor.year - 1
    if anchor.month - month > 6:
        return anchor.year + 1
    return anchor.year


def add_timestamps(frame: pl.DataFrame, state: YearState) -> pl.DataFrame:
    """Add `ts` (datetime) and `ts_raw` from the envelope columns md/hms/cts/bts."""
    month = pl.col("md").str.slice(0, 2).cast(pl.Int32, strict=False)
    months = frame.select(month.forward_fill().alias("m"))["m"]
    prev = months.shift(1, fill_value=state.last_month)
    back = ((months < prev - 6) & months.is_not_null() & prev.is_not_null()).cast(pl.Int32)
    year = state.base_year + state.rollovers + back.cum_sum()
    if months.drop_nulls().len():
        state.last_month = int(months.drop_nulls()[-1])
    state.rollovers += int(back.sum())
    container = pl.coalesce(
        pl.col("cts").str.slice(0, 4).cast(pl.Int32, strict=False),
        pl.col("bts").str.slice(0, 4).cast(pl.Int32, strict=False),
    )
    stamp = pl.concat_str(
        [
            pl.coalesce(container, pl.lit(year)).cast(pl.String),
            pl.lit("-"),
            pl.col("md"),
            pl.lit(" "),
            pl.col("hms"),
        ]
    )
    out = frame.with_columns(
        stamp.str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False).alias("ts"),
        pl.when(pl.col("md").is_not_null())
        .then(pl.concat_str([pl.col("md"), pl.lit(" "), pl.col("hms")]))
        .alias("ts_raw"),
    )
    if out.select(container.is_not_null().any()).item():
        state.used_container_year = True
    return out
