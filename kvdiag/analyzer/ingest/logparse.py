"""Vectorised matching of a format pack against a batch of log lines.

Works on polars frames, batch by batch: control characters are stripped, envelope
prefixes peeled off into columns, then each event is tried only on lines containing its
literal (one multi-literal scan selects them, so lines that match no format cost almost
nothing), and its variants in order. A line that contains an event's literal but matches
none of its variants is a *near miss*: it is counted as unmatched, so a changed message
format shows up as falling coverage, not as silence. Header-less lines of known shapes
(tracebacks, warnings, progress bars) are records: parsed, but carrying no event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.fieldtypes import convert
from kvdiag.analyzer.ingest.formats import EnvelopeStep, Event, FormatPack

# ANSI CSI sequences (colours, cursor moves) and OSC titles, then any other C0 control
# character except tab. `\r` goes too: vLLM ends continuation lines with \r\n.
_ANSI = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]"
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f]"

MAX_STORED_LINE = 4096  # raw text kept per stored row; longer lines are cut (and say so)
_OUTER = "_outer"  # suffix of the columns a stacked (repeated) prefix moves outward to


def clean_expr(col: str = "text") -> pl.Expr:
    """Text with ANSI sequences and control characters removed."""
    return pl.col(col).str.replace_all(_ANSI, "").str.replace_all(_CONTROL, "")


def envelope_columns(pack: FormatPack) -> list[str]:
    """Every column the envelope steps can produce, in pack order (with _outer copies)."""
    cols: list[str] = []
    for step in pack.envelope:
        groups = list(re.compile(step.pattern).groupindex)
        outer = [g + _OUTER for g in groups] if step.repeat else []
        cols += [g for g in (*groups, *outer) if g not in cols]
    return cols


def _peel(frame: pl.DataFrame, step: EnvelopeStep, again: bool) -> tuple[pl.DataFrame, bool]:
    """Extract one envelope step's groups from `msg` and strip the matched prefix.

    One regex pass: the whole prefix is captured too, and stripped by its length.
    On a repeated pass the values already peeled move to `<group>_outer`: with two stacked
    prefixes the inner one, next to the message, is the writer of the message.
    """
    groups = list(re.compile(step.pattern).groupindex)
    found = pl.col("msg").str.extract_groups(f"^(?P<_all>(?:{step.pattern[1:]}))")
    frame = frame.with_columns(found.alias("_x"))
    hit = pl.col("_x").struct.field("_all").is_not_null()
    if not frame.select(hit.any()).item():
        return frame.drop("_x"), False
    moved = [
        pl.when(hit).then(pl.col(g)).otherwise(pl.col(g + _OUTER)).alias(g + _OUTER) for g in groups
    ]
    updates = [
        pl.when(hit).then(pl.col("_x").struct.field(g)).otherwise(pl.col(g)).alias(g)
        for g in groups
    ]
    strip = pl.col("_x").struct.field("_all").str.len_chars().fill_null(0)
    frame = frame.with_columns(*(moved if again else []), *updates)
    frame = frame.with_columns(
        pl.col("msg").str.slice(strip),
        (pl.col("_envelope") | hit).alias("_envelope") if step.record else pl.col("_envelope"),
    )
    return frame.drop("_x"), True


def apply_envelope(frame: pl.DataFrame, pack: FormatPack) -> pl.DataFrame:
    """Add envelope columns and `msg` (the text after every prefix)."""
    frame = frame.with_columns(
        clean_expr("text").alias("clean"),
        *[pl.lit(None, pl.String).alias(c) for c in envelope_columns(pack)],
        pl.lit(False).alias("_envelope"),
    ).with_columns(pl.col("clean").alias("msg"))
    for step in pack.envelope:
        frame, hit = _peel(frame, step, again=False)
        for _ in range(2 if step.repeat else 0):  # interleaved writers stack two, rarely three
            if not hit:
                break
            frame, hit = _peel(frame, step, again=True)
    return frame


@dataclass(frozen=True, slots=True)
class EventRows:
    """Rows one event matched in a batch, typed, with the envelope columns."""

    event: Event
    frame: pl.DataFrame


def variant_index(event: Event, col: str = "msg") -> pl.Expr:
    """Index of the first variant whose regex matches `col`, else null."""
    expr = pl.lit(None, pl.Int32)
    for i in reversed(range(len(event.variants))):
        hit = pl.col(col).str.contains(event.variants[i][1])
        expr = pl.when(hit).then(pl.lit(i, pl.Int32)).otherwise(expr)
    return expr


def _joined(frame: pl.DataFrame, cand: pl.DataFrame, event: Event) -> pl.DataFrame:
    """Candidates with `_jmsg` (the message with its continuation lines) and `_last` row.

    same_header: following lines carrying the identical logger header (vLLM repeats the
    header on every line of a multi-line message). backslash: following lines while the
    previous one ends with a shell line continuation.
    """
    n = frame.height
    idx = cand["_i"]
    joined, lines, last = cand["msg"], cand["clean"], idx
    going = pl.Series([True] * cand.height)
    key = _header_key(frame) if event.join == "same_header" else None
    for k in range(1, event.join_max + 1):
        nxt = (idx + k).clip(upper_bound=n - 1)
        ok = going & (idx + k < n) & frame["event"].gather(nxt).is_null()
        if key is not None:
            ok = ok & (key.gather(nxt) == key.gather(idx)).fill_null(False)
            ok = ok & ~frame["msg"].gather(nxt).str.contains(event.literal, literal=True)
        else:
            prev = (idx + k - 1).clip(upper_bound=n - 1)
            ok = ok & frame["clean"].gather(prev).str.ends_with("\\")
        if not ok.any():
            break
        joined = _extend(ok, joined, frame["msg"].gather(nxt))
        lines = _extend(ok, lines, frame["clean"].gather(nxt))
        last = pl.select(pl.when(ok).then(nxt).otherwise(last)).to_series()
        going = ok
    return cand.with_columns(
        joined.alias("_jmsg"), lines.alias("_jraw"), last.cast(pl.UInt32).alias("_last")
    )


def _extend(ok: pl.Series, text: pl.Series, piece: pl.Series) -> pl.Series:
    return pl.select(pl.when(ok).then(text + "\n" + piece).otherwise(text)).to_series()


def _header_key(frame: pl.DataFrame) -> pl.Series:
    cols = ["proc", "pid", "level", "md", "hms", "srcfile", "srcline"]
    present = [c for c in cols if c in frame.columns]
    key = pl.concat_str([pl.col(c).fill_null("") for c in present], separator="|")
    return frame.select(pl.when(pl.col("md").is_not_null()).then(key)).to_series()


def _classify(frame: pl.DataFrame, cand: pl.DataFrame, event: Event) -> pl.DataFrame:
    """Candidates with `_variant`; joined messages first, the single line as fallback."""
    if event.join is None:
        return cand.with_columns(
            variant_index(event).alias("_variant"),
            pl.col("_i").alias("_last"),
            pl.lit(None, pl.String).alias("raw_lines"),
        )
    cand = _joined(frame, cand, event).with_columns(variant_index(event, "_jmsg").alias("_jv"))
    joined = pl.col("_jv").is_not_null() & (pl.col("_last") > pl.col("_i"))
    return cand.with_columns(
        pl.coalesce("_jv", variant_index(event)).alias("_variant"),
        pl.when(joined).then("_last").otherwise("_i").alias("_last"),
        pl.when(joined).then("_jmsg").otherwise("msg").alias("msg"),
        pl.when(joined).then("_jraw").alias("raw_lines"),
    ).drop("_jv", "_jmsg", "_jraw")


def match_events(frame: pl.DataFrame, pack: FormatPack) -> tuple[pl.DataFrame, list[EventRows]]:
    """Classify each line: add `event` (id or null) and `near_miss`; return rows per event.

    A line gets at most one event: the first, in pack order, whose variant matches. Lines
    a multi-line event consumed as its continuation get that event's id too.
    """
    frame = frame.with_row_index("_i").with_columns(
        pl.lit(None, pl.String).alias("event"),
        pl.lit(False).alias("near_miss"),
        pl.col("line_no").alias("line_end"),
    )
    out: list[EventRows] = []
    literals = "|".join(re.escape(e.literal) for e in pack.events)
    if literals:
        pool = frame.filter(pl.col("msg").str.contains(literals))
        for event in pack.events:
            cand = pool.filter(pl.col("msg").str.contains(event.literal, literal=True))
            if cand.is_empty():
                continue
            cand = _classify(frame, cand, event)
            hits = cand.filter(pl.col("_variant").is_not_null())
            if event.near_miss:
                misses = cand.filter(pl.col("_variant").is_null())["_i"]
                frame = frame.with_columns(frame["near_miss"].scatter(misses, True))
            if hits.is_empty():
                continue
            frame, hits = _assign(frame, hits, event)
            taken = frame.filter(pl.col("event").is_not_null())["_i"].implode()
            pool = pool.filter(~pl.col("_i").is_in(taken))
            out.append(EventRows(event, extract_fields(hits, event)))
    # A line that matched an event is not a near miss of another event's literal.
    frame = frame.with_columns((pl.col("near_miss") & pl.col("event").is_null()).alias("near_miss"))
    return frame, out


def _assign(
    frame: pl.DataFrame, hits: pl.DataFrame, event: Event
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Mark the hit rows (and the continuation rows they consumed) with the event."""
    spans = hits.select(pl.int_ranges("_i", pl.col("_last") + 1, dtype=pl.UInt32).alias("r"))
    rows = spans.explode("r")["r"]
    line_end = frame["line_no"].gather(hits["_last"])
    frame = frame.with_columns(frame["event"].scatter(rows, event.id))
    return frame, hits.with_columns(line_end.alias("line_end")).drop("_last")


def extract_fields(hits: pl.DataFrame, event: Event) -> pl.DataFrame:
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
    typed = pl.concat(parts, how="vertical_relaxed")
    for name, pattern in event.extract.items():
        found = pl.col("msg").str.extract(pattern, 1)
        typed = typed.with_columns(pl.coalesce(pl.col(name), found).alias(name))
    return typed.with_columns(
        *[convert(name, ftype) for name, ftype in event.fields.items()],
        *[pl.lit(value).alias(name) for name, value in event.set.items()],
    )


def mark_records(frame: pl.DataFrame, pack: FormatPack) -> pl.DataFrame:
    """Add `record`: the id of the record shape a line without header or event has."""
    frame = frame.with_columns(pl.lit(None, pl.String).alias("record"))
    free = pl.col("event").is_null() & ~pl.col("near_miss") & ~pl.col("_envelope")
    todo = frame.filter(free)
    if todo.is_empty() or not pack.records:
        return frame
    # One pass decides which lines are records at all; the id costs a pass per shape
    # only over those lines.
    anyrec = "|".join(f"(?:{r.pattern})" for r in pack.records)
    todo = todo.filter(pl.col("msg").str.contains(anyrec))
    ids = pl.lit(None, pl.String)
    for rec in reversed(pack.records):
        ids = pl.when(pl.col("msg").str.contains(rec.pattern)).then(pl.lit(rec.id)).otherwise(ids)
    todo = todo.with_columns(ids.alias("record"))
    return frame.with_columns(frame["record"].scatter(todo["_i"], todo["record"]))


def parsed_expr() -> pl.Expr:
    """A piece of a line is parsed when it is an event, a record or a logger record."""
    known = pl.col("_envelope") | pl.col("event").is_not_null() | pl.col("record").is_not_null()
    return known & ~pl.col("near_miss")
