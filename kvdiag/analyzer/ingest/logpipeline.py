"""One batch of log lines through every step, in order.

split glued records -> envelope -> attribute interleaved prefixes -> timestamps ->
events (with multi-line joins) -> rejoin wrapped lines -> records.

The ingester and the format tests both call `parse_batch`, so a sample line goes through
exactly the code a real file does.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.formats import FormatPack
from kvdiag.analyzer.ingest.logparse import (
    EventRows,
    apply_envelope,
    clean_expr,
    mark_records,
    match_events,
)
from kvdiag.analyzer.ingest.logtime import YearState, add_timestamps
from kvdiag.analyzer.ingest.repair import (
    Repairs,
    attribute_interleaved,
    rejoin_wrapped,
    split_glued,
)


@dataclass(frozen=True, slots=True)
class Parsed:
    """A parsed batch: one row per piece of a line, and the rows each event matched."""

    frame: pl.DataFrame
    events: list[EventRows]


def lines_frame(lines: list[str], first_line: int = 1) -> pl.DataFrame:
    """A batch as the reader yields it, from in-memory lines (tests, samples)."""
    return pl.DataFrame(
        {"line_no": list(range(first_line, first_line + len(lines))), "text": lines},
        schema={"line_no": pl.Int64, "text": pl.String},
    )


def parse_batch(
    batch: pl.DataFrame,
    pack: FormatPack,
    year: YearState | None = None,
    repairs: Repairs | None = None,
) -> Parsed:
    """Parse a batch (`line_no`, `text`); `year` adds timestamps, `repairs` counts fixes."""
    repairs = repairs if repairs is not None else Repairs()
    # Colour codes can sit inside a header, so records are split on the cleaned text.
    frame = split_glued(batch.with_columns(clean_expr("text").alias("clean")), repairs)
    frame = apply_envelope(frame, pack)
    frame = attribute_interleaved(frame, repairs)
    if year is not None:
        frame = add_timestamps(frame, year)
    frame, events = match_events(frame, pack)
    frame, rejoined = rejoin_wrapped(frame, pack, repairs)
    frame = mark_records(frame, pack)
    return Parsed(frame, events + rejoined)
