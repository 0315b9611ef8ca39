"""One batch of log lines through every step, in order.

split glued records -> envelope -> attribute interleaved prefixes -> events (with
multi-line joins) -> records -> the residue: engine text behind an unknown prefix, wrapped
lines rejoined, the file's learned prefix stripped (logs/residue.py, logs/wraps.py).

The ingester and the format tests both call `parse_batch`, so a sample line goes through
exactly the code a real file does.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import FormatPack, load_pack
from kvdiag.analyzer.ingest.logs.parse import (
    EventRows,
    apply_envelope,
    clean_expr,
    gap_expr,
    mark_records,
    match_events,
)
from kvdiag.analyzer.ingest.logs.residue import (
    ANCHORED,
    LEARNED,
    Reread,
    count,
    learned_shapes,
    read_anchored,
    read_learned,
    readings,
    write_back,
)
from kvdiag.analyzer.ingest.logs.timestamps import YearState, add_timestamps
from kvdiag.analyzer.ingest.logs.wraps import rejoin_wrapped
from kvdiag.analyzer.text.repair import Repairs, attribute_interleaved, split_glued


@dataclass(frozen=True, slots=True)
class Parsed:
    """A parsed batch: one row per piece of a line, and the rows each event matched."""

    frame: pl.DataFrame
    events: list[EventRows]
    repaired: int = 0  # the last `repaired` entries of events come from the residue


def lines_frame(lines: list[str], first_line: int = 1) -> pl.DataFrame:
    """A batch as the reader yields it, from in-memory lines (tests, samples)."""
    return pl.DataFrame(
        {"line_no": list(range(first_line, first_line + len(lines))), "text": lines},
        schema={"line_no": pl.Int64, "text": pl.String},
    )


def parse_batch(batch: pl.DataFrame, pack: FormatPack, repairs: Repairs | None = None) -> Parsed:
    """Parse a batch (`line_no`, `text`); `repairs` counts the fixes."""
    repairs = repairs if repairs is not None else Repairs()
    # Colour codes can sit inside a header, so records are split on the cleaned text.
    frame = split_glued(batch.with_columns(clean_expr("text").alias("clean")), repairs)
    frame = apply_envelope(frame.with_columns(gap_expr()), pack)
    frame = attribute_interleaved(frame, repairs)
    frame, events = match_events(frame, pack)
    frame = mark_records(frame, pack)
    frame, events, repaired = _residue(frame, events, pack, repairs)
    return Parsed(frame, events + repaired, len(repaired))


def _residue(
    frame: pl.DataFrame, matched: list[EventRows], pack: FormatPack, repairs: Repairs
) -> tuple[pl.DataFrame, list[EventRows], list[EventRows]]:
    """Read what the pack left: anchored lines, then wrapped runs (whose pieces lose what
    they read alone), then the learned prefixes. (frame, matched, repaired events)"""
    anchored = read_anchored(frame, pack)
    frame = write_back(frame, anchored.rows)
    reading = readings(frame.height, matched, "_i").scatter(
        anchored.rows["_orig"],
        readings(frame.height, anchored.events, "_orig").gather(anchored.rows["_orig"]),
    )
    wrapped = rejoin_wrapped(frame, pack, repairs, reading)
    frame = wrapped.frame
    if wrapped.pieces.len():
        matched = _without(matched, "_i", wrapped.pieces)
        anchored = Reread(
            anchored.rows.filter(~pl.col("_orig").is_in(wrapped.pieces.implode())),
            _without(anchored.events, "_orig", wrapped.pieces),
        )
    count(repairs, ANCHORED, anchored.rows)
    prefixes = pl.concat([anchored.rows["_pre"].cast(pl.String), wrapped.prefixes.cast(pl.String)])
    learned = read_learned(frame, pack, learned_shapes(prefixes))
    frame = write_back(frame, learned.rows)
    count(repairs, LEARNED, learned.rows)
    return frame, matched, anchored.events + wrapped.events + learned.events


def _without(events: list[EventRows], key: str, rows: pl.Series) -> list[EventRows]:
    """Event rows whose row (`key`) is not among `rows`."""
    out = [EventRows(e.event, e.frame.filter(~pl.col(key).is_in(rows.implode()))) for e in events]
    return [e for e in out if e.frame.height]


def stamp_events(events: list[EventRows], year: YearState, stamped_lines: int) -> list[EventRows]:
    """Add `ts` and `ts_raw` to event rows in file order, carrying the year across batches.

    The year advances where months go backwards from one event line to the next: the
    lines whose times the store keeps. `stamped_lines` (lines the container stamped, over
    all the lines the batch parsed) is counted by the caller, who saw them all.
    """
    saved = year.container_lines
    if events:
        keys = pl.concat(
            [_time_keys(k, rows.frame) for k, rows in enumerate(events)], how="vertical_relaxed"
        ).sort("line_no", "part", maintain_order=True)
        times = add_timestamps(keys, year).partition_by("_e", as_dict=True)
        events = [
            EventRows(rows.event, rows.frame.hstack(_times(times[(k,)])))
            for k, rows in enumerate(events)
        ]
    year.container_lines = saved + stamped_lines
    return events


def _time_keys(k: int, frame: pl.DataFrame) -> pl.DataFrame:
    def col(name: str) -> pl.Expr:
        return pl.col(name) if name in frame.columns else pl.lit(None, pl.String).alias(name)

    return frame.select(
        pl.lit(k).alias("_e"),
        pl.int_range(pl.len()).alias("_r"),
        "line_no",
        pl.col("part").cast(pl.Int32),
        *[col(c) for c in ("md", "hms", "cts", "bts")],
    )


def _times(stamped: pl.DataFrame) -> list[pl.Series]:
    ordered = stamped.sort("_r")
    return [ordered["ts"], ordered["ts_raw"]]


SNIFF_LINES = 400  # lines of a file's head that sniffing looks for events in


def pack_events(pack_name: str, head: str) -> int:
    """How many lines of the head are events a pack marks as its engine's own (header or not)."""
    pack = load_pack(pack_name)
    if not any(e.literal in head for e in pack.events if e.sniff):
        return 0  # the common case (other engines, scrapes, tables): a few substring tests
    parsed = parse_batch(lines_frame(head.split("\n")[:SNIFF_LINES]), pack)
    return sum(rows.frame.height for rows in parsed.events if rows.event.sniff)
