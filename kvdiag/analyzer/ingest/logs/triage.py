"""Decide each log line's fate with cheap tests, so that few lines need the full parse.

The full parse (`steps.parse_batch`) peels every envelope, looks for every event's
literal, tries variants, joins and repairs: exact, and slow. Most lines of a big
vLLM log have one of a few plain shapes that the full parse always reads the same way,
so they are decided by one or two anchored DFA tests each:

- access: uvicorn access lines `INFO:     CLIENT - "METHOD PATH HTTP/x" STATUS REASON`
  with a status below 400, counted per (method, path, status) instead of one row each;
- header: a logger header (at most one plain process prefix, then level, time and
  [file:line]) whose line holds no event literal, no glued second header and no control
  character: parsed, nothing to extract;
- uvicorn: uvicorn's other lines (`INFO:     Started server process`), same conditions;
- record: header-less lines of a known record shape (traceback frames, warnings ...);
- hot events (the periodic stats lines): a plain header and the event's first variant,
  matched and extracted with one regex.

Everything else, and every line near one that needs its neighbours (a header line
followed by a header-less one may be a wrapped record, a line ending in a backslash
continues, a multi-line message joins following lines), goes through the full parse as
a subset of the batch whose gaps are marked, so nothing is ever joined across a gap.

Why the plain shapes are exact: a line starting `INFO:` + blanks, `(` or a level word
cannot match the envelope steps before the ones the shape names (pod, compose service,
container stamp, `[rankN]:` all need other first characters); the shapes use the steps'
own sub-patterns with ASCII digits and no control characters, so where they match, the
full parse strips the same prefix; a line with no event literal cannot be an event or a
near miss. tests/test_logtriage.py checks the claim on every real log and on generated
lines by parsing them both ways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import Event, FormatPack, load_pack
from kvdiag.analyzer.ingest.logs.parse import CONTROL, EventRows, finish_fields
from kvdiag.analyzer.text.ascii_regex import ascii_only
from kvdiag.analyzer.text.repair import GLUED

_LEVEL = "DEBUG|INFO|WARNING|ERROR|CRITICAL"
_NOCTL = r"\x00-\x1f\x7f"
# The `process` and `header` envelope steps of formats/vllm_log.toml, without the
# VLLM_LOGGING_PREFIX and with ASCII digits: their groups keep the pack's names.
_PROCESS = rf"\((?P<proc>[^(){_NOCTL}]+?) pid=(?P<pid>[0-9]+)(?:, ip=[^){_NOCTL}]*)?\) ?"
HEADER = (
    rf"^(?:{_PROCESS})?(?P<level>{_LEVEL}) (?P<md>[0-9][0-9]-[0-9][0-9]) "
    r"(?P<hms>[0-9][0-9]:[0-9][0-9]:[0-9][0-9])(?:\.[0-9]+)? "
    rf"\[?(?P<srcfile>[^\]\s:{_NOCTL}]+):(?P<srcline>[0-9]+)\] ?"
)
_HEADER_GROUPS = ("proc", "pid", "level", "md", "hms", "srcfile", "srcline")
# uvicorn's own logger (the `uvicorn` envelope step) at the start of a line.
_UVICORN = rf"^(?:{_LEVEL}):\s+"
ACCESS = r'^INFO: +[!-~]+ - "'
_ACCESS_AT = ' - "'
# The rest of an access line from ` - "`: what the `http_access` variant reads.
ACCESS_KEY = (
    r'^ - "(?P<method>[A-Z]+) (?P<path>[!-~]+) HTTP/[0-9.]+" (?P<status>[0-9]{3})(?: [A-Za-z ]*)?$'
)
_ODD = f"{CONTROL}|{GLUED}"
# A column of the fast lane's event rows: true where the row's line may be stored by
# reference (ingest/base.py IngestContext.text_by_reference).
BY_REFERENCE = "_by_ref"
REJECTED = 400  # access lines at or above this status keep a row each, so they can be cited
_CONTEXT = 2  # rows around a fully parsed line that go with it (wrapped records span 3)


@dataclass(frozen=True, slots=True)
class HotEvent:
    """An event decided in the fast lane: the header regex + its first variant."""

    event: Event
    regex: str  # HEADER + the first variant, with the groups of both
    ascii_regex: str | None  # the same for ASCII lines, faster (ascii_regex.py); None: none
    # Literals of events earlier in the pack whose presence sends a line to the full
    # parse (they might match first); those proven unable to match are left out.
    earlier: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Lanes:
    """The fast-lane tests for one pack, compiled to polars-ready patterns."""

    pack: FormatPack
    risky: str  # a control character, a glued header, or anything an event may need
    envelope: str  # some envelope step could match at the start of the line
    record: str  # some record shape matches
    hot: tuple[HotEvent, ...]
    join_literals: tuple[tuple[str, int], ...]  # same_header events: literal, join_max


def _unnamed(pattern: str) -> str:
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


def _body(pattern: str) -> str:
    """An anchored pattern without its ^, as a group that can follow another pattern."""
    return f"(?:{pattern[1:]})"


def _risky(pack: FormatPack) -> str:
    """Anything that could make the full parse read a line differently from a plain shape.

    Events that count near misses need only their literal; the others (a literal as
    common as `vllm`) need their variant somewhere in the line, which over-approximates
    the variant anchored after the envelope.
    """
    parts = [CONTROL, GLUED]
    for event in pack.events:
        if event.near_miss:
            parts.append(re.escape(event.literal))
        else:
            parts += [_unnamed(_body(v)) for _, v in event.variants]
    return "|".join(dict.fromkeys(parts))


def _hot(pack: FormatPack, ids: dict[str, tuple[str, ...]]) -> tuple[HotEvent, ...]:
    out = []
    for i, event in enumerate(pack.events):
        if event.id not in ids or event.join is not None:
            continue
        first = event.variants[0][1]
        assert not set(re.compile(first).groupindex) & set(_HEADER_GROUPS), event.id
        allowed = ids[event.id]
        earlier = tuple(
            e.literal for e in pack.events[:i] if e.id not in allowed and e.literal != event.literal
        )
        regex = f"{HEADER}(?P<msg>{first[1:]})"
        out.append(HotEvent(event, regex, _ascii_or_none(regex), tuple(dict.fromkeys(earlier))))
    return tuple(out)


def _ascii_or_none(regex: str) -> str | None:
    try:
        return ascii_only(regex)
    except ValueError:
        return None


@cache
def vllm_lanes() -> Lanes:
    """Lanes for formats/vllm_log.toml.

    Hot events: the periodic stats lines. A v1 stats line holds the v0 literal
    (`Avg prompt throughput: `) but never matches a v0 variant: v0 prints `Swapped:` where
    v1 prints `Waiting:`, right after `Running: N reqs, `.
    """
    pack = load_pack("vllm_log")
    return build_lanes(pack, {"stats_v0": (), "stats_v1": ("stats_v0",)})


def build_lanes(pack: FormatPack, hot: dict[str, tuple[str, ...]]) -> Lanes:
    """Lanes for a pack whose envelope is vLLM's; `hot` maps event ids to the earlier
    events proven unable to match their lines."""
    envelope = "|".join(f"(?:{_unnamed(step.pattern)})" for step in pack.envelope)
    record = "|".join(f"(?:{_unnamed(r.pattern)})" for r in pack.records)
    joins = tuple((e.literal, e.join_max) for e in pack.events if e.join == "same_header")
    return Lanes(pack, _risky(pack), envelope, record, _hot(pack, hot), joins)


@dataclass(frozen=True, slots=True)
class Triage:
    """A batch split by fate."""

    slow: pl.DataFrame  # rows (line_no, text) for the full parse, with gaps
    fast_parsed: int  # rows decided in a fast lane (all parsed)
    access: pl.DataFrame  # method, path, status, count, first, last, raw
    hot: list[EventRows]  # hot events' rows, shaped like the full parse's


def _scatter(n: int, rows: pl.Series) -> pl.Series:
    """A mask of n rows, true at `rows`."""
    mask = pl.repeat(False, n, dtype=pl.Boolean, eager=True).alias("m")
    return mask.scatter(rows, True) if rows.len() else mask


def _dilate(mask: pl.Series, before: int, after: int) -> pl.Series:
    """Rows within `before` rows above or `after` rows below a marked row."""
    frame = pl.DataFrame({"m": mask})
    near = [pl.col("m").shift(k, fill_value=False) for k in range(1, after + 1)]
    near += [pl.col("m").shift(-k, fill_value=False) for k in range(1, before + 1)]
    return frame.select(pl.any_horizontal(pl.col("m"), *near).alias("m"))["m"]


def _access(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Access lines (_i, line_no, text, key, plain), and each distinct key's fields.

    A line is plain when its key reads as a request with a status below 400. The fields
    are read once per distinct key (a handful), not once per line.
    """
    text = pl.col("text")
    keyed = frame.with_columns(text.str.slice(text.str.find(_ACCESS_AT, literal=True)).alias("key"))
    keys = keyed.select(pl.col("key").unique())
    fields = keys.with_columns(pl.col("key").str.extract_groups(ACCESS_KEY).alias("f")).unnest("f")
    fields = fields.with_columns(pl.col("status").cast(pl.Int64, strict=False))
    plain = fields.filter(pl.col("status") < REJECTED)["key"]
    return keyed.with_columns(pl.col("key").is_in(plain.implode()).alias("plain")), fields


def _other_lanes(frame: pl.DataFrame, lanes: Lanes) -> pl.DataFrame:
    """Non-access rows with `hdr` (plain header) and `lane` (fast lane name, or null)."""
    text = pl.col("text")
    flags = frame.with_columns(
        text.str.contains(HEADER).alias("hdr"), text.str.contains(lanes.risky).alias("risky")
    )
    bare = flags.filter(~pl.col("hdr") & ~pl.col("risky")).select(
        "_i",
        text.str.contains(_UVICORN).alias("uv"),
        text.str.contains(lanes.envelope).alias("env"),
        text.str.contains(lanes.record).alias("rec"),
    )
    bare_lane = (
        pl.when(pl.col("uv"))
        .then(pl.lit("uvicorn"))
        .when(~pl.col("env") & pl.col("rec"))
        .then(pl.lit("record"))
    )
    lane = bare.select("_i", bare_lane.alias("lane"))
    flags = flags.join(lane, on="_i", how="left", maintain_order="left")
    plain = pl.col("hdr") & ~pl.col("risky")
    return flags.with_columns(pl.when(plain).then(pl.lit("header")).otherwise("lane").alias("lane"))


def _hot_rows(frame: pl.DataFrame, lanes: Lanes) -> tuple[list[EventRows], pl.Series]:
    """Hot events among plain-header rows holding a literal; and the rows they took."""
    out: list[EventRows] = []
    taken: list[pl.Series] = []
    text = pl.col("text")
    for hot in lanes.hot:
        cand = frame.filter(text.str.contains(hot.event.literal, literal=True))
        if taken:
            cand = cand.filter(~pl.col("_i").is_in(pl.concat(taken).implode()))
        if cand.is_empty():
            continue
        hits = _groups(cand, hot).filter(pl.col("level").is_not_null())
        # Controls would be cleaned and a glued record split off: the full parse decides.
        odd = text.str.contains(_ODD)
        if hot.earlier:
            odd = odd | text.str.contains_any(list(hot.earlier))
        hits = hits.filter(~odd)
        if hits.is_empty():
            continue
        taken.append(hits["_i"])
        out.append(EventRows(hot.event, _shape(hits, hot.event)))
    rows = pl.concat(taken) if taken else pl.Series("_i", [], pl.UInt32)
    return out, rows


def _groups(cand: pl.DataFrame, hot: HotEvent) -> pl.DataFrame:
    """Candidate rows with the hot regex's groups (null where it does not match), in row
    order. Lines of ASCII text go through its ASCII form, which polars runs faster
    (ascii_regex.py)."""

    def extract(rows: pl.DataFrame, regex: str) -> pl.DataFrame:
        return rows.with_columns(pl.col("text").str.extract_groups(regex).alias("_g"))

    if hot.ascii_regex is None:
        return extract(cand, hot.regex).unnest("_g")
    text = pl.col("text")
    ascii_line = cand.select(text.str.len_bytes() == text.str.len_chars())["text"]
    if ascii_line.all():
        return extract(cand, hot.ascii_regex).unnest("_g")
    parts = [
        extract(cand.filter(ascii_line), hot.ascii_regex),
        extract(cand.filter(~ascii_line), hot.regex),
    ]
    return pl.concat(parts).sort("_i").unnest("_g")


def _shape(hits: pl.DataFrame, event: Event) -> pl.DataFrame:
    """Hot rows with the columns the full parse gives an event's rows."""
    groups = set(re.compile(event.variants[0][1]).groupindex)
    typed = hits.with_columns(
        pl.col("text").alias("clean"),
        # The line reads back from its file as it is here (lines.line_of) unless bytes
        # were not UTF-8: only then may its text be left out of the store.
        (~pl.col("text").str.contains("\ufffd", literal=True)).alias(BY_REFERENCE),
        pl.col("line_no").alias("line_end"),
        pl.lit(0, pl.Int32).alias("part"),
        pl.lit(0, pl.Int32).alias("_variant"),
        *[pl.lit(None, pl.String).alias(c) for c in ("raw_lines", "repair", "pod", "cts", "bts")],
        pl.lit(None, pl.String).alias("rank_prefix"),
        *[pl.lit(None, pl.String).alias(f) for f in event.fields if f not in groups],
    )
    return finish_fields(typed, event)


def triage(batch: pl.DataFrame, lanes: Lanes) -> Triage:
    """Split a batch (line_no, text) into fast-lane results and rows for the full parse."""
    n = batch.height
    frame = batch.with_row_index("_i")
    is_access = frame.select(pl.col("text").str.contains(ACCESS))["text"]
    access, key_fields = _access(frame.filter(is_access))
    plain = access.filter("plain")
    other = _other_lanes(frame.filter(~is_access), lanes)
    hot, hot_rows = _hot_rows(other.filter(pl.col("hdr") & pl.col("risky")), lanes)
    fast = pl.concat(
        [
            plain["_i"],
            other.filter(pl.col("lane").is_not_null())["_i"],
            hot_rows,
        ]
    )
    slow = ~_scatter(n, fast)
    slow = slow | _needs_context(frame, other, n)
    slow = _dilate(slow, _CONTEXT, _CONTEXT)
    slow = slow | _joins(frame, slow, lanes)
    fast_mask = ~slow
    kept_access = plain.filter(fast_mask.gather(plain["_i"]))
    hot = [EventRows(h.event, h.frame.filter(fast_mask.gather(h.frame["_i"]))) for h in hot]
    return Triage(
        slow=batch.filter(slow),
        fast_parsed=int(fast_mask.sum()),
        access=_count_access(kept_access, key_fields),
        hot=[h for h in hot if h.frame.height],
    )


def _needs_context(frame: pl.DataFrame, other: pl.DataFrame, n: int) -> pl.Series:
    """Rows whose neighbours may change how they read.

    A record line right after a header line may continue it (a wrapped record), and a
    line ending in a backslash continues on the next (a shell command).
    """
    hdr = _scatter(n, other.filter(pl.col("hdr"))["_i"])
    records = other.filter(pl.col("lane") == "record")["_i"]
    prev_hdr = hdr.gather((records.cast(pl.Int64) - 1).clip(lower_bound=0)) & (records > 0)
    after_header = records.filter(prev_hdr)
    backslash = frame.filter(pl.col("text").str.ends_with("\\"))["_i"]
    return _scatter(n, pl.concat([after_header, backslash]))


def _joins(frame: pl.DataFrame, slow: pl.Series, lanes: Lanes) -> pl.Series:
    """Rows a same-header join may take after a slow line holding its literal."""
    n = frame.height
    if not lanes.join_literals:
        return pl.Series("m", [False] * n, pl.Boolean)
    cand = frame.filter(slow)
    ranges = []
    for literal, join_max in lanes.join_literals:
        starts = cand.filter(pl.col("text").str.contains(literal, literal=True))["_i"]
        if starts.len():
            ranges.append(
                pl.select(
                    pl.int_ranges(starts, (starts + join_max + 1).clip(upper_bound=n)).explode()
                ).to_series()
            )
    if not ranges:
        return pl.Series("m", [False] * n, pl.Boolean)
    return _scatter(n, pl.concat(ranges).cast(pl.UInt32))


def _count_access(rows: pl.DataFrame, fields: pl.DataFrame) -> pl.DataFrame:
    """Plain access lines per key: method, path, status, count, first and last line, and
    the first line's text. Keys that differ only in protocol or reason are folded into
    one (method, path, status) row later, with the rest of the file (logaccess.AccessBook)."""
    counted = rows.group_by("key").agg(
        pl.len().cast(pl.Int64).alias("count"),
        pl.col("line_no").min().alias("first"),
        pl.col("line_no").max().alias("last"),
        pl.col("text").sort_by("line_no").first().alias("raw"),
    )
    return counted.join(fields, on="key").select(
        "method", "path", "status", "count", "first", "last", "raw"
    )
