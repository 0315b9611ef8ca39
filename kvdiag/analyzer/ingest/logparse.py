"""Vectorised matching of a format pack against a batch of log lines.

Works on polars frames, batch by batch: control characters are stripped, envelope
prefixes peeled off into columns, then each event is tried only on lines containing its
literal (a substring test costs little), and its variants in order. A line that contains
an event's literal but matches none of its variants is a *near miss*: it is counted as
unmatched, so a changed message format shows up as falling coverage, not as silence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.formats import EnvelopeStep, Event, FormatPack

# ANSI CSI sequences (colours, cursor moves) and OSC titles, then any other C0 control
# character except tab. `\r` goes too: vLLM ends continuation lines with \r\n.
_ANSI = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]"
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f]"

MAX_STORED_LINE = 4096  # raw text kept per stored row; longer lines are cut (and say so)


def clean_expr(col: str = "text") -> pl.Expr:
    """Text with ANSI sequences and control characters removed."""
    return pl.col(col).str.replace_all(_ANSI, "").str.replace_all(_CONTROL, "")


def envelope_columns(pack: FormatPack) -> list[str]:
    """Every column the envelope steps can produce, in pack order."""
    cols: list[str] = []
    for step in pack.envelope:
        cols += [g for g in re.compile(step.pattern).groupindex if g not in cols]
    return cols


def _peel(frame: pl.DataFrame, step: EnvelopeStep) -> pl.DataFrame:
    """Extract one envelope step's groups from `msg` and strip the matched prefix."""
    groups = list(re.compile(step.pattern).groupindex)
    hit = pl.col("msg").str.contains(step.pattern)
    extracted = pl.col("msg").str.extract_groups(step.pattern)
    updates = [
        pl.when(hit).then(extracted.struct.field(g)).otherwise(pl.col(g)).alias(g) for g in groups
    ]
    return frame.with_columns(
        *updates,
        pl.col("msg").str.replace(step.pattern, ""),
        (pl.col("_envelope") | hit).alias("_envelope") if step.record else pl.col("_envelope"),
    )


def apply_envelope(frame: pl.DataFrame, pack: FormatPack) -> pl.DataFrame:
    """Add envelope columns and `msg` (the text after every prefix)."""
    frame = frame.with_columns(
        clean_expr("text").alias("clean"),
        *[pl.lit(None, pl.String).alias(c) for c in envelope_columns(pack)],
        pl.lit(False).alias("_envelope"),
    ).with_columns(pl.col("clean").alias("msg"))
    for step in pack.envelope:
        # A repeated prefix (two interleaved writers) is peeled twice; the inner one,
        # next to the message, is the writer of the message and wins.
        for _ in range(3 if step.repeat else 1):
            frame = _peel(frame, step)
    return frame


def _cast(name: str, ftype: str) -> pl.Expr:
    col = pl.col(name)
    if ftype == "int":
        return col.str.replace_all(",", "").cast(pl.Int64, strict=False).alias(name)
    if ftype == "float":
        return col.str.replace_all(",", "").cast(pl.Float64, strict=False).alias(name)
    return col


@dataclass(frozen=True, slots=True)
class EventRows:
    """Rows one event matched in a batch, typed, with the envelope columns."""

    event: Event
    frame: pl.DataFrame


def _variant_index(event: Event) -> pl.Expr:
    expr = pl.lit(None, pl.Int32)
    for i in reversed(range(len(event.variants))):
        expr = (
            pl.when(pl.col("msg").str.contains(event.variants[i][1]))
            .then(pl.lit(i))
            .otherwise(expr)
        )
    return expr


def match_events(frame: pl.DataFrame, pack: FormatPack) -> tuple[pl.DataFrame, list[EventRows]]:
    """Classify each line: add `event` (id or null) and `near_miss`; return rows per event.

    A line gets at most one event: the first, in pack order, whose variant matches.
    """
    events = pl.Series("event", [None] * frame.height, pl.String)
    near = pl.Series("near_miss", [False] * frame.height, pl.Boolean)
    out: list[EventRows] = []
    candidates = "|".join(re.escape(e.literal) for e in pack.events)
    if candidates:
        pool = frame.with_row_index("_i").filter(pl.col("msg").str.contains(candidates))
        for event in pack.events:
            cand = pool.filter(pl.col("msg").str.contains(event.literal, literal=True))
            if cand.is_empty():
                continue
            cand = cand.with_columns(_variant_index(event).alias("_variant"))
            hits = cand.filter(pl.col("_variant").is_not_null())
            near = near.scatter(cand.filter(pl.col("_variant").is_null())["_i"], True)
            if hits.is_empty():
                continue
            events = events.scatter(hits["_i"], event.id)
            pool = pool.filter(~pl.col("_i").is_in(hits["_i"].implode()))
            out.append(EventRows(event, _extract(hits, event)))
    # A line that matched an event is not a near miss of another event's literal.
    return frame.with_columns(events, (near & events.is_null()).alias("near_miss")), out


def _extract(hits: pl.DataFrame, event: Event) -> pl.DataFrame:
    """Typed field columns for the lines one event matched, variant by variant."""
    parts = []
    for i, (_version, pattern) in enumerate(event.variants):
        sub = hits.filter(pl.col("_variant") == i)
        if sub.is_empty():
            continue
        groups = list(re.compile(pattern).groupindex)
        sub = sub.with_columns(pl.col("msg").str.extract_groups(pattern).alias("_g")).with_columns(
            *[pl.col("_g").struct.field(g).alias(g) for g in groups],
            *[pl.lit(None, pl.String).alias(f) for f in event.fields if f not in groups],
        )
        parts.append(sub.drop("_g"))
    typed = pl.concat(parts, how="vertical_relaxed").with_columns(
        *[_cast(name, ftype) for name, ftype in event.fields.items()],
        *[pl.lit(value).alias(name) for name, value in event.set.items()],
    )
    return typed
