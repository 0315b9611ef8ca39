"""One batch of a log file, read by a worker thread: fast lanes, the full parse of the rest.

A batch needs nothing from the batches before it except the year, which only event rows
need: the worker returns event rows without timestamps, and the reader stamps them in
file order (`steps.stamp_events`). So batches are read two at a time (polars
releases the GIL), while the main thread reads ahead and hands rows to the store.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import FormatPack
from kvdiag.analyzer.ingest.logs.parse import EventRows, apply_envelope, parsed_expr
from kvdiag.analyzer.ingest.logs.residue import with_stamps
from kvdiag.analyzer.ingest.logs.steps import Parsed, parse_batch
from kvdiag.analyzer.ingest.logs.triage import Lanes, triage
from kvdiag.analyzer.text.lines import Chunk, frame_lines
from kvdiag.analyzer.text.repair import Repairs

HEAD_LINES = 1000  # lines of a file's first batch that date it (logtime.initial_year)
_EMPTY_ACCESS = pl.DataFrame(
    schema={
        "method": pl.String,
        "path": pl.String,
        "status": pl.Int64,
        "count": pl.Int64,
        "first": pl.Int64,
        "last": pl.Int64,
        "raw": pl.String,
    }
)


@dataclass(frozen=True, slots=True)
class LineCounts:
    """Physical lines of a batch by fate, and the unmatched ones (line_no, clean)."""

    total: int
    parsed: int
    unmatched: int
    undecodable: int
    unmatched_rows: pl.DataFrame


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one batch yields; event rows are not stamped with times yet."""

    counts: LineCounts
    events: list[EventRows]
    access: pl.DataFrame  # plain access lines counted per method, path, status
    repairs: Repairs
    container_lines: int  # lines timed by a container stamp
    head: pl.DataFrame | None  # the first lines, enveloped, when the batch starts the file
    # (first line, lines, byte offset, byte length) when the chunk was read in place
    block: tuple[int, int, int, int] | None = None


def count_lines(lines: int, parsed: Parsed) -> LineCounts:
    """Per physical line: parsed only when every piece of it is (glued lines split)."""
    bad_text = pl.col("text").str.contains("\ufffd", literal=True)
    pieces = parsed.frame.select(
        "line_no", "part", "clean", parsed_expr().alias("p"), bad_text.alias("bad")
    )
    if pieces.height != lines:  # only the few split lines need grouping
        split = pieces.filter(pl.col("part") > 0)["line_no"].unique().implode()
        whole = pieces.filter(pl.col("line_no").is_in(split))
        grouped = whole.group_by("line_no", maintain_order=True).agg(
            pl.col("part").first(),
            pl.col("clean").str.join(""),
            pl.col("p").all(),
            pl.col("bad").any(),
        )
        pieces = pl.concat([pieces.filter(~pl.col("line_no").is_in(split)), grouped])
    p, u, n = pieces.select(
        pl.col("p").sum(),
        (~pl.col("p") & pl.col("bad")).sum().alias("u"),
        (~pl.col("p") & ~pl.col("bad")).sum().alias("n"),
    ).row(0)
    unmatched = pieces.filter(~pl.col("p") & ~pl.col("bad")).select("line_no", "clean")
    return LineCounts(lines, int(p), int(n), int(u), unmatched)


def read_batch(chunk: Chunk, pack: FormatPack, lanes: Lanes | None) -> BatchResult:
    """Parse one chunk of whole lines: fast lanes first when the pack has them."""
    batch = frame_lines(chunk.data, chunk.first_line, chunk.lines)
    repairs = Repairs()
    if lanes is None:
        parsed = parse_batch(batch, pack, repairs)
        counts = count_lines(batch.height, parsed)
        head = _head(chunk, batch, pack, parsed)
        return BatchResult(
            counts, parsed.events, _EMPTY_ACCESS, repairs, _stamped(parsed), head, _block(chunk)
        )
    split = triage(batch, lanes)
    parsed = parse_batch(split.slow, pack, repairs)
    slow = count_lines(split.slow.height, parsed)
    counts = LineCounts(
        batch.height,
        slow.parsed + split.fast_parsed,
        slow.unmatched,
        slow.undecodable,
        slow.unmatched_rows,
    )
    matched = len(parsed.events) - parsed.repaired
    events = _merge(pack, parsed.events[:matched] + split.hot) + parsed.events[matched:]
    head = _head(chunk, batch, pack, parsed)
    return BatchResult(counts, events, split.access, repairs, _stamped(parsed), head, _block(chunk))


def _block(chunk: Chunk) -> tuple[int, int, int, int] | None:
    if chunk.span is None:
        return None
    return (chunk.first_line, chunk.lines, *chunk.span)


def _head(
    chunk: Chunk, batch: pl.DataFrame, pack: FormatPack, parsed: Parsed
) -> pl.DataFrame | None:
    """The file's first lines, enveloped, with the stamps found behind an unknown prefix
    (a CI system's or a collector's), so that they date the file too."""
    if chunk.first_line != 1:
        return None
    head = with_stamps(apply_envelope(batch.head(HEAD_LINES), pack))
    found = (
        with_stamps(parsed.frame)
        .filter(pl.col("part") == 0)
        .select("line_no", pl.col("cts").alias("_c"), pl.col("bts").alias("_b"))
    )
    head = head.join(found, on="line_no", how="left", maintain_order="left")
    return head.with_columns(
        pl.coalesce("cts", "_c").alias("cts"), pl.coalesce("bts", "_b").alias("bts")
    ).drop("_c", "_b")


def _merge(pack: FormatPack, found: list[EventRows]) -> list[EventRows]:
    """One frame per event, in pack order, rows in line order: as one full parse gives."""
    out = []
    for event in pack.events:
        frames = [rows.frame for rows in found if rows.event.id == event.id]
        if len(frames) == 1:
            out.append(EventRows(event, frames[0]))
        elif frames:
            rows = pl.concat(frames, how="diagonal_relaxed").sort("line_no", "part")
            out.append(EventRows(event, rows))
    return out


def _stamped(parsed: Parsed) -> int:
    if "cts" not in parsed.frame.columns:
        return 0
    return int(parsed.frame.select(pl.col("cts").is_not_null().sum()).item())
