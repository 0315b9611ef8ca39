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
from dataclasses import dataclass, replace

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import EnvelopeStep, Event, FormatPack
from kvdiag.analyzer.schema.fieldtypes import convert_fields

# ANSI CSI sequences (colours, cursor moves) and OSC titles, then any other C0 control
# character except tab. `\r` goes too: vLLM ends continuation lines with \r\n.
_ANSI = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]"
CONTROL = r"[\x00-\x08\x0b-\x1f\x7f]"  # clean changes exactly the lines holding one
_UNCLEAN = f"{_ANSI}|{CONTROL}"  # one pass: escape sequences first, then stray controls

MAX_STORED_LINE = 4096  # raw text kept per stored row; longer lines are cut (and say so)
_OUTER = "_outer"  # suffix of the columns a stacked (repeated) prefix moves outward to
# The logger header: lines of one multi-line message repeat it exactly.
_HEADER_COLS = ("proc", "pid", "level", "md", "hms", "srcfile", "srcline")
_SHARED_COLS = (*_HEADER_COLS, "pod", "cts", "bts", "rank_prefix")


def gap_expr() -> pl.Expr:
    """`_gap`: the row does not follow the row above in the file (a subset of a batch).

    Pieces of one physical line (glued records) follow each other; a row after a missing
    line does not, so nothing joins across it.
    """
    return (pl.col("line_no") - pl.col("line_no").shift(1)).fill_null(1).gt(1).alias("_gap")


def gaps(frame: pl.DataFrame) -> pl.Series:
    """The `_gap` column, or no gaps when the frame is a whole batch without one."""
    if "_gap" in frame.columns:
        return frame["_gap"]
    return pl.repeat(False, frame.height, dtype=pl.Boolean, eager=True)


def clean_expr(col: str = "text") -> pl.Expr:
    """Text with ANSI sequences and control characters removed."""
    return pl.col(col).str.replace_all(_UNCLEAN, "")


def envelope_columns(pack: FormatPack) -> list[str]:
    """Every column the envelope steps can produce, in pack order (with _outer copies),
    and the ones the shared ingester reads whatever the pack (null where it has no step)."""
    cols: list[str] = []
    for step in pack.envelope:
        groups = list(re.compile(step.pattern).groupindex)
        outer = [g + _OUTER for g in groups] if step.repeat else []
        cols += [g for g in (*groups, *outer) if g not in cols]
    return cols + [c for c in _SHARED_COLS if c not in cols]


def _peel(frame: pl.DataFrame, step: EnvelopeStep, again: bool) -> tuple[pl.DataFrame, bool]:
    """Extract one envelope step's groups from `msg` and strip the matched prefix.

    An anchored test rejects most lines at their first bytes; only the lines that carry
    the prefix are captured (the whole prefix too, stripped by its length). On a repeated
    pass the values already peeled move to `<group>_outer`: with two stacked prefixes the
    inner one, next to the message, is the writer of the message.
    """
    hit = frame.select(pl.col("msg").str.contains(step.pattern))["msg"]
    idx = hit.arg_true()
    if idx.is_empty():
        return frame, False
    groups = list(re.compile(step.pattern).groupindex)
    found = (
        frame["msg"]
        .gather(idx)
        .str.extract_groups(f"^(?P<_all>(?:{step.pattern[1:]}))")
        .struct.unnest()
    )
    # An empty capture (an optional prefix that is absent) keeps what an earlier step found.
    updates = [
        frame[g].scatter(idx, found[g].replace("", None).fill_null(frame[g].gather(idx)))
        for g in groups
    ]
    if again:
        updates += [frame[g + _OUTER].scatter(idx, frame[g].gather(idx)) for g in groups]
    stripped = frame["msg"].gather(idx).str.slice(found["_all"].str.len_chars())
    updates.append(frame["msg"].scatter(idx, stripped))
    if step.record:
        updates.append(frame["_envelope"].scatter(idx, True))
    return frame.with_columns(updates), True


def apply_envelope(frame: pl.DataFrame, pack: FormatPack) -> pl.DataFrame:
    """Add envelope columns and `msg` (the text after every prefix)."""
    if "clean" not in frame.columns:
        frame = frame.with_columns(clean_expr("text").alias("clean"))
    frame = frame.with_columns(
        *[pl.lit(None, pl.String).alias(c) for c in envelope_columns(pack)],
        pl.lit(False).alias("_envelope"),
    ).with_columns(pl.col("clean").alias("msg"))
    return peel_envelope(frame, pack)


def peel_envelope(frame: pl.DataFrame, pack: FormatPack) -> pl.DataFrame:
    """Strip the pack's prefixes from `msg`, in order; columns found already are kept
    unless a step finds them again."""
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


def _joined(
    frame: pl.DataFrame, cand: pl.DataFrame, event: Event, claimed: pl.Series
) -> pl.DataFrame:
    """Candidates with `_jmsg` (the message with its continuation lines) and `_last` row.

    same_header: following lines carrying the identical logger header (vLLM repeats the
    header on every line of a multi-line message). backslash: following lines while the
    previous one ends with a shell line continuation. indented: following header-less lines
    that are indented, up to the closing brace at the margin (Rust's `{:#?}` of a struct, as
    TGI's launcher prints its Args from 2.1). Lines an event already took are never
    continuations.
    """
    n = frame.height
    idx = cand["_i"]
    joined, lines, last = cand["msg"], cand["clean"], idx
    going = pl.Series([True] * cand.height, dtype=pl.Boolean)
    same_header = event.join == "same_header"
    key = _header_key(frame, idx) if same_header else None
    for k in range(1, event.join_max + 1):
        nxt = (idx + k).clip(upper_bound=n - 1)
        ok = going & (idx + k < n) & ~claimed.gather(nxt) & ~gaps(frame).gather(nxt)
        if key is not None:
            ok = ok & (_header_key(frame, nxt) == key).fill_null(False)
            ok = ok & ~frame["msg"].gather(nxt).str.contains(event.literal, literal=True)
        elif event.join == "indented":
            prev = frame["clean"].gather((idx + k - 1).clip(upper_bound=n - 1))
            bare = frame["level"].gather(nxt).is_null() if "level" in frame.columns else ok
            ok = ok & bare & (k == 1 or ~(prev == "}"))
            ok = ok & frame["clean"].gather(nxt).str.contains(r"^(?:\s{2,}\S|\}$)")
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


def _header_key(frame: pl.DataFrame, rows: pl.Series) -> pl.Series:
    """The logger header of the given rows as one string (null where there is none)."""
    cols = [c for c in _HEADER_COLS if c in frame.columns]
    at = frame.select(pl.col(cols).gather(rows))
    key = pl.concat_str([pl.col(c).fill_null("") for c in cols], separator="|")
    return at.select(pl.when(pl.col("md").is_not_null()).then(key)).to_series()


def _classify(
    frame: pl.DataFrame, cand: pl.DataFrame, event: Event, claimed: pl.Series
) -> pl.DataFrame:
    """Candidates with `_variant`; joined messages first, the single line as fallback."""
    if event.join is None:
        return cand.with_columns(
            variant_index(event).alias("_variant"),
            pl.col("_i").alias("_last"),
            pl.lit(None, pl.String).alias("raw_lines"),
        )
    # Only a line that can start a multi-line message is worth joining.
    can_start = {
        "same_header": pl.col("md").is_not_null(),
        "indented": pl.col("clean").str.ends_with("{"),
    }.get(event.join, pl.col("clean").str.ends_with("\\"))
    starts = cand.filter(can_start)
    single = _classify(frame, cand.filter(~can_start), replace(event, join=None), claimed)
    if starts.is_empty():
        return single
    cand = _joined(frame, starts, event, claimed)
    cand = cand.with_columns(variant_index(event, "_jmsg").alias("_jv"))
    joined = pl.col("_jv").is_not_null() & (pl.col("_last") > pl.col("_i"))
    cand = cand.with_columns(
        pl.coalesce("_jv", variant_index(event)).alias("_variant"),
        pl.when(joined).then("_last").otherwise("_i").alias("_last"),
        pl.when(joined).then("_jmsg").otherwise("msg").alias("msg"),
        pl.when(joined).then("_jraw").alias("raw_lines"),
    ).drop("_jv", "_jmsg", "_jraw")
    return pl.concat([cand, single], how="diagonal_relaxed")


@dataclass
class _Claims:
    """Rows each event took in a batch, applied to the frame once at the end."""

    n: int
    taken: list[tuple[str, pl.Series]]
    misses: list[pl.Series]
    mask: pl.Series  # rows some event took so far

    def take(self, event_id: str, rows: pl.Series) -> None:
        self.taken.append((event_id, rows))
        self.mask.scatter(rows, True)

    def columns(self) -> list[pl.Series]:
        event = pl.Series("event", [None] * self.n, pl.String)
        for event_id, rows in self.taken:
            event = event.scatter(rows, event_id)
        near = pl.Series("near_miss", [False] * self.n, pl.Boolean)
        if self.misses:
            near = near.scatter(pl.concat(self.misses), True)
        # A line that matched an event is not a near miss of another event's literal.
        return [event, near & event.is_null()]


def _candidates(frame: pl.DataFrame, pack: FormatPack) -> dict[str, pl.Series]:
    """Row indices of the lines holding each literal: one multi-literal scan of the batch."""
    literals = sorted({e.literal for e in pack.events})
    if not literals or frame.is_empty():
        return {}
    found = pl.col("msg").str.extract_many(literals, overlapping=True).list.unique().alias("lit")
    pairs = frame.select("_i", found).filter(pl.col("lit").list.len() > 0).explode("lit")
    return {str(k[0]): part["_i"] for k, part in pairs.partition_by("lit", as_dict=True).items()}


def match_events(frame: pl.DataFrame, pack: FormatPack) -> tuple[pl.DataFrame, list[EventRows]]:
    """Classify each line: add `event` (id or null) and `near_miss`; return rows per event.

    A line gets at most one event: the first, in pack order, whose variant matches. Lines
    a multi-line event consumed as its continuation get that event's id too.
    """
    frame = frame.with_row_index("_i").with_columns(pl.col("line_no").alias("line_end"))
    n = frame.height
    claims = _Claims(n, [], [], pl.Series("taken", [False] * n, pl.Boolean))
    out: list[EventRows] = []
    candidates = _candidates(frame, pack)
    for event in pack.events:
        idx = candidates.get(event.literal)
        if idx is None:
            continue
        idx = idx.filter(~claims.mask.gather(idx))
        if idx.is_empty():
            continue
        cand = _classify(frame, frame[idx], event, claims.mask)
        hits = cand.filter(pl.col("_variant").is_not_null())
        if event.near_miss:
            claims.misses.append(cand.filter(pl.col("_variant").is_null())["_i"])
        if hits.is_empty():
            continue
        rows = hits.select(pl.int_ranges("_i", pl.col("_last") + 1, dtype=pl.UInt32).alias("r"))
        claims.take(event.id, rows.explode("r")["r"])
        line_end = frame["line_no"].gather(hits["_last"])
        hits = hits.with_columns(line_end.alias("line_end")).drop("_last")
        out.append(EventRows(event, extract_fields(hits, event)))
    return frame.with_columns(claims.columns()), out


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
    return finish_fields(pl.concat(parts, how="diagonal_relaxed"), event)


def finish_fields(typed: pl.DataFrame, event: Event) -> pl.DataFrame:
    """Captured fields completed by the event's `extract` patterns, typed, `set` added."""
    for name, pattern in event.extract.items():
        found = pl.col("msg").str.extract(pattern, 1)
        typed = typed.with_columns(pl.coalesce(pl.col(name), found).alias(name))
    typed = convert_fields(typed, event.fields)
    return typed.with_columns(pl.lit(value).alias(name) for name, value in event.set.items())


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
