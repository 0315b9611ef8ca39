"""Timestamps for log lines that print no year (`MM-DD HH:MM:SS`).

The year comes, in order of preference, from a container timestamp on the line
(`docker logs --timestamps`, a collector's `[YYYY-MM-DD HH:MM:SS]`), the `--year` option,
an absolute time seen elsewhere in the incident folder (scrape file names), or the file's
modification time. Months that go backwards within a file or a rotated set
(12-31 -> 01-01) advance the year. The chosen source is reported per file.

An RFC 3339 container stamp carries its zone, so it is the line's time (in UTC); vLLM's
own `MM-DD HH:MM:SS` is the server's local time and is kept in `ts_raw`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from kvdiag.analyzer.ingest.base import IngestContext


@dataclass
class YearState:
    """Year bookkeeping carried from batch to batch, and file to file in a rotated set."""

    base_year: int
    source: str
    last_month: int | None = None
    rollovers: int = 0
    container_lines: int = 0  # lines whose time came from a container stamp

    def note(self) -> str:
        rolled = f", {self.rollovers} year rollover(s) (12-31 -> 01-01)" if self.rollovers else ""
        return f"year {self.base_year} from {self.source}{rolled}"


def _container_year(frame: pl.DataFrame) -> tuple[int, int] | None:
    """(year, line) of the first container stamp in the batch, if any."""
    stamped = frame.select(
        "line_no",
        pl.coalesce(pl.col("cts"), pl.col("bts")).str.slice(0, 4).cast(pl.Int32, strict=False),
    ).drop_nulls()
    if stamped.is_empty():
        return None
    line, year = stamped.row(0)
    return int(year), int(line)


def initial_year(ctx: IngestContext, path: Path, frame: pl.DataFrame) -> YearState:
    """Pick the base year for a file from its first batch and the context."""
    first = frame["md"].drop_nulls()
    month_day = (int(first[0][:2]), int(first[0][3:5])) if first.len() else None
    month = month_day[0] if month_day else None
    if (stamp := _container_year(frame)) is not None:
        return YearState(stamp[0], f"container timestamp ({path.name}:{stamp[1]})")
    if ctx.year is not None:
        return YearState(ctx.year, "--year option")
    if ctx.anchor is not None:
        return YearState(_near(ctx.anchor, month), f"{ctx.anchor_source} ({ctx.anchor.date()})")
    mtime = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    source = f"modification time of {path.name} ({mtime.date()})"
    return YearState(_not_after(mtime, month_day), source)


def _near(anchor: datetime, month: int | None) -> int:
    """The year that puts `month` closest to the anchor (a December log, a January anchor)."""
    if month is None:
        return anchor.year
    if month - anchor.month > 6:
        return anchor.year - 1
    if anchor.month - month > 6:
        return anchor.year + 1
    return anchor.year


def _not_after(mtime: datetime, month_day: tuple[int, int] | None) -> int:
    """The year that puts the first line at or before the file's last write."""
    if month_day is None or month_day <= (mtime.month, mtime.day):
        return mtime.year
    return mtime.year - 1


def _rfc3339(col: str) -> pl.Expr:
    text = pl.col(col).str.replace(r"Z$", "+00:00")
    zoned = text.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", strict=False)
    return zoned.dt.convert_time_zone("UTC").dt.replace_time_zone(None).dt.cast_time_unit("us")


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
    bts_year = pl.col("bts").str.slice(0, 4).cast(pl.Int32, strict=False)
    local = pl.concat_str(
        [pl.coalesce(bts_year, pl.lit(year)).cast(pl.String), pl.lit("-"), "md", pl.lit(" "), "hms"]
    ).str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False)
    collector = (
        pl.col("bts").str.replace(",", ".").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False)
    )
    out = frame.with_columns(
        pl.coalesce(_rfc3339("cts"), local, collector).dt.cast_time_unit("us").alias("ts"),
        pl.coalesce(
            pl.concat_str([pl.col("md"), pl.lit(" "), pl.col("hms")]), pl.col("cts"), pl.col("bts")
        ).alias("ts_raw"),
    )
    state.container_lines += int(out.select(pl.col("cts").is_not_null().sum()).item())
    return out
