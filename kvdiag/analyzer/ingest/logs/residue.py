"""The engine's own text where the pack did not find it: behind a prefix it does not know.

A line read neither as an event nor as a record may still hold the engine's header or a
whole message behind text that a deployment or a paste put before it: a Python logging
format (`2025-01-01 10:00:00,123 - vllm.core.scheduler - WARNING - `), a CI system's or a
collector's stamp, `> ` quoting, indentation. The engine's text is the signature:

- anchored: the earliest place after a non-word character where an `anchor` envelope step
  (a process prefix, the logger header) matches, or else where a whole event message
  starts (a variant, which runs to the end of the line). What precedes it is the line's
  prefix; the rest is parsed as a line of its own, and a date-time in the prefix times it.
- learned: the prefixes of anchored lines, generalised to a shape (date-times, times,
  levels and words as classes), are the file's envelope where a shape repeats. A shape is
  stripped from the other unread lines, which count as parsed when the rest parses, or
  when the shape is a logger header itself (a level and a time): a record of that logger
  whose message kvdiag does not need.

Only the residue (lines nothing parsed) is searched, so a log the pack reads costs a filter.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import FormatPack
from kvdiag.analyzer.ingest.logs.parse import (
    EventRows,
    apply_envelope,
    mark_records,
    match_events,
    parsed_expr,
    peel_envelope,
)
from kvdiag.analyzer.text.repair import Repairs

MAX_PREFIX = 200  # characters: longer text before the engine's is not an envelope
# Empty, or ending in a non-word character: the engine's text starts a word.
_PREFIX = r"^(?P<_pre>(?:.*?[^\w])?)"
_DATETIME = (
    r"(?P<_d>\d{4}-\d\d-\d\d)[T ](?P<_t>\d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<_z>Z|[+-]\d\d:?\d\d)?"
)
_LEVELS = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_TIME = r"\d\d:\d\d:\d\d(?:[.,]\d+)?"
_WORD = r"[\w.\-/]+"
# Shape tokens: a prefix generalised, one character per class (see _shape, _shape_regex).
_DT, _LV, _TM, _WD = "\x01", "\x02", "\x03", "\x04"
_TOKEN_REGEX = {
    _DT: re.sub(r"\(\?P<\w+>", "(?:", _DATETIME),
    _LV: _LEVELS,
    _TM: _TIME,
    _WD: _WORD,
    " ": r"\s+",
}
# A prefix of date-times alone (bracketed or not): stamps of a CI system or a collector.
STAMPS_ONLY = rf"^(?:\[?{_TOKEN_REGEX[_DT]}\]?\s+)+$"
MIN_REPEATS = 2  # anchored lines a shape needs before it is the file's envelope
# Columns the first parse added, which a line parsed again gets afresh.
_PARSE_COLUMNS = ("_i", "line_end", "event", "near_miss", "record", "_variant", "ts", "ts_raw")
ANCHORED = "read behind an unknown prefix"  # a row's repair label
LEARNED = "read behind the file's learned prefix"


@dataclass(frozen=True, slots=True)
class Reread:
    """Lines read again: the rows that parsed (with `_orig`, their row in the batch, and
    `_pre`, the prefix left out) and the rows of each event among them."""

    rows: pl.DataFrame
    events: list[EventRows]


def _unnamed(pattern: str) -> str:
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


def header_anchor(pack: FormatPack) -> str | None:
    """A regex whose `_pre` group is the text before the first anchor step, or None."""
    steps = [_unnamed(s.pattern[1:]) for s in pack.envelope if s.anchor]
    return f"{_PREFIX}(?:{'|'.join(steps)})" if steps else None


def _message_anchors(pack: FormatPack) -> list[tuple[str, str]]:
    """(literal, regex) per event: `_pre` is the text before a whole message of it.

    Events that count no near misses are left out: their text is common enough to sit
    inside any sentence (`... Restart vllm serve with --flag ...`)."""
    return [
        (e.literal, f"{_PREFIX}(?:{'|'.join(_unnamed(v[1:]) for _, v in e.variants)})")
        for e in pack.events
        if e.near_miss
    ]


def _guard_literals(pack: FormatPack) -> list[str]:
    """Literals a prefix may not hold: a message cut short before a header is no envelope.
    Events that count no near misses have literals too common to mean anything."""
    return sorted({e.literal for e in pack.events if e.near_miss})


def residue(frame: pl.DataFrame) -> pl.Series:
    """Rows nothing parsed and no engine header started."""
    return frame.select((~parsed_expr() & ~pl.col("_envelope")).alias("r"))["r"]


def find_prefixes(rows: pl.DataFrame, pack: FormatPack) -> pl.DataFrame:
    """Rows with `_pre` (the prefix before the engine's text) where one was found, `_at`
    (where the engine's text starts in the line) and `msg` set to the rest; rows without
    one are dropped."""
    if rows.is_empty():
        return rows.with_columns(pl.lit(None, pl.String).alias("_pre"), pl.lit(0).alias("_at"))
    text = pl.col("msg").str.strip_chars_end()
    rows = rows.with_columns(
        pl.col("msg").alias("_msg0"), text.alias("msg"), pl.lit(None, pl.String).alias("_pre")
    )
    anchor = header_anchor(pack)
    if anchor is not None:
        rows = rows.with_columns(pl.col("msg").str.extract(anchor, 1).alias("_pre"))
    for literal, regex in _message_anchors(pack):
        todo = pl.col("_pre").is_null() & pl.col("msg").str.contains(literal, literal=True)
        found = pl.when(todo).then(pl.col("msg").str.extract(regex, 1)).otherwise("_pre")
        rows = rows.with_columns(found.alias("_pre"))
    pre = pl.col("_pre")
    ok = pre.is_not_null() & (pre.str.len_chars() <= MAX_PREFIX)
    if guard := _guard_literals(pack):
        ok = ok & ~pre.str.contains_any(guard)
    rows = rows.filter(ok)
    # Where the engine's text starts in the line: after the envelope and the prefix.
    at = pl.col("clean").str.len_chars() - pl.col("_msg0").str.len_chars() + pre.str.len_chars()
    return rows.with_columns(
        pl.col("msg").str.slice(pre.str.len_chars()).alias("msg"), at.alias("_at")
    ).drop("_msg0")


def with_stamps(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with `cts` and `bts` (null where a pack's envelope has no such group)."""
    missing = [c for c in ("cts", "bts") if c not in frame.columns]
    return frame.with_columns(pl.lit(None, pl.String).alias(c) for c in missing)


def _stamp_from_prefix(rows: pl.DataFrame) -> pl.DataFrame:
    """A date-time in the prefix times the line: with a zone as a container stamp (UTC),
    without one as a collector's (local) stamp; stamps the envelope found come first."""
    rows = with_stamps(rows)
    found = pl.col("_pre").str.extract_groups(_DATETIME)
    day, clock, zone = (found.struct.field(g) for g in ("_d", "_t", "_z"))
    clock = clock.str.replace(",", ".")
    zone = zone.str.replace(r"^([+-]\d\d)(\d\d)$", "${1}:${2}")
    zoned = pl.concat_str([day, pl.lit("T"), clock, zone])
    local = pl.when(zone.is_null()).then(pl.concat_str([day, pl.lit(" "), clock]))
    return rows.with_columns(
        pl.coalesce("cts", zoned).alias("cts"), pl.coalesce("bts", local).alias("bts")
    )


def reread(rows: pl.DataFrame, pack: FormatPack, label: str, logger: bool = False) -> Reread:
    """Parse rows again from their `msg` (a prefix already cut off into `_pre`), each as a
    line of its own; keep those that parse. `logger`: the prefix was a logger header, so
    a line whose rest is no event still counts as a record of it (not a near miss)."""
    rows = rows.rename({"_i": "_orig"}).drop(
        [c for c in _PARSE_COLUMNS if c in rows.columns and c != "_i"]
    )
    rows = peel_envelope(rows.with_columns(pl.lit(True).alias("_gap")), pack)
    label_expr = pl.concat_str([pl.col("repair"), pl.lit(label)], separator="; ", ignore_nulls=True)
    rows = _stamp_from_prefix(rows).with_columns(label_expr.alias("repair"))
    if logger:
        rows = rows.with_columns(pl.lit(True).alias("_envelope"))
    rows, events = match_events(rows, pack)
    rows = mark_records(rows, pack)
    return Reread(rows.filter(parsed_expr()), [e for e in events if e.frame.height])


def write_back(frame: pl.DataFrame, done: pl.DataFrame) -> pl.DataFrame:
    """The batch with the rows read again (by `_orig`) taking their new reading."""
    if done.is_empty():
        return frame
    at = done["_orig"]
    frame = with_stamps(frame)
    cols = ("event", "near_miss", "record", "_envelope", "cts", "bts", "repair")
    return frame.with_columns(frame[c].scatter(at, done[c].cast(frame[c].dtype)) for c in cols)


def read_anchored(frame: pl.DataFrame, pack: FormatPack) -> Reread:
    """Residue rows whose engine text sits behind an unknown prefix, read again."""
    rows = find_prefixes(frame.filter(residue(frame)), pack)
    if rows.is_empty():
        return Reread(rows.rename({"_i": "_orig"}), [])
    return reread(rows, pack, ANCHORED)


def _shape() -> pl.Expr:
    """A prefix generalised: date-times, times, levels and words as one character each,
    blank runs as one space."""
    return (
        pl.col("_pre")
        .str.replace_all(_TOKEN_REGEX[_DT], _DT)
        .str.replace_all(_TIME, _TM)
        .str.replace_all(rf"\b{_LEVELS}\b", _LV)
        .str.replace_all(_WORD, _WD)
        .str.replace_all(r"\s+", " ")
    )


def _shape_regex(shape: str) -> str:
    return "^(?P<_pre>" + "".join(_TOKEN_REGEX.get(ch, re.escape(ch)) for ch in shape) + ")"


def learned_shapes(prefixes: pl.Series) -> list[str]:
    """Shapes of the prefixes that repeat, most frequent first."""
    if prefixes.is_empty():
        return []
    shapes = pl.DataFrame({"_pre": prefixes}).select(_shape().alias("s"))["s"]
    counts = Counter(s for s in shapes.to_list() if s)
    return [s for s, n in counts.most_common() if n >= MIN_REPEATS]


def read_learned(frame: pl.DataFrame, pack: FormatPack, shapes: list[str]) -> Reread:
    """Residue rows that start with a learned shape, read again behind it."""
    done: list[pl.DataFrame] = []
    events: list[EventRows] = []
    for shape in shapes:
        rows = frame.filter(residue(frame))
        if done:
            rows = rows.filter(~pl.col("_i").is_in(pl.concat([d["_orig"] for d in done]).implode()))
        rows = rows.with_columns(pl.col("msg").str.extract(_shape_regex(shape), 1).alias("_pre"))
        rows = rows.filter(pl.col("_pre").is_not_null())
        if rows.is_empty():
            continue
        rows = rows.with_columns(pl.col("msg").str.slice(pl.col("_pre").str.len_chars()))
        logger = _LV in shape and (_DT in shape or _TM in shape)
        got = reread(rows, pack, LEARNED, logger)
        done.append(got.rows)
        events += got.events
    if not done:
        return Reread(frame.clear(), [])
    return Reread(pl.concat(done, how="diagonal_relaxed"), events)


def count(repairs: Repairs, label: str, rows: pl.DataFrame) -> None:
    """Count rows read again under their repair's label (plural: the lines so read)."""
    if rows.height:
        repairs.add(f"lines {label}", [str(n) for n in rows.sort("line_no")["line_no"].to_list()])


@dataclass(frozen=True, slots=True)
class Alone:
    """Lines parsed each on its own: per line `event`, `_pre` (a prefix left out) and `_at`
    (where the text read starts); the rows of each event with `_row`, their line."""

    frame: pl.DataFrame
    events: list[EventRows]


def parse_alone(lines: pl.DataFrame, pack: FormatPack) -> Alone:
    """Lines (line_no, part, text, clean, repair) parsed with the residue search, each as
    a line of its own: nothing joins across them."""
    lines = lines.with_columns(pl.lit(True).alias("_gap"))
    frame, matched = match_events(apply_envelope(lines, pack), pack)
    frame = mark_records(frame, pack)
    events = [EventRows(e.event, e.frame.with_columns(pl.col("_i").alias("_row"))) for e in matched]
    anchored = read_anchored(frame, pack)
    frame = write_back(frame, anchored.rows).with_columns(
        pl.lit(None, pl.String).alias("_pre"), pl.lit(0, pl.Int64).alias("_at")
    )
    if anchored.rows.height:
        at = anchored.rows["_orig"]
        frame = frame.with_columns(
            frame["_pre"].scatter(at, anchored.rows["_pre"]),
            frame["_at"].scatter(at, anchored.rows["_at"].cast(pl.Int64)),
        )
        events += [
            EventRows(e.event, e.frame.with_columns(pl.col("_orig").alias("_row")))
            for e in anchored.events
        ]
    return Alone(frame, events)


def readings(n: int, events: list[EventRows], key: str) -> pl.Series:
    """Per row (of n; `key` names the row column of each event frame) what its event read:
    the event id and every field, as one string; null where no event read the row."""
    out = pl.Series("reading", [None] * n, pl.String)
    for rows in events:
        fields = [pl.col(f).cast(pl.String).fill_null("") for f in rows.event.fields]
        text = pl.concat_str([pl.lit(rows.event.id), *fields], separator="|")
        read = rows.frame.select(pl.col(key), text.alias("r"))
        out = out.scatter(read[key], read["r"])
    return out
