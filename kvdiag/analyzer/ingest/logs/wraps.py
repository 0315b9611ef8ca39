"""Records a terminal broke into lines, joined back where they then read as one.

A terminal W characters wide breaks a long record into pieces of W characters, the last
one shorter; a copy may strip a piece's trailing blank. The first piece keeps whatever
came first (a container stamp, the engine header), the others carry neither, though at a
narrow width a piece may look like a header (`INFO 05-12 08:01:39 `). So a run starts at
a piece at full width that no event took (or one that holds an event cut short: `# GPU
blocks: 5` of `# GPU blocks: 5691`); the next line continues it, and so does each line
after a piece at full width (W or W - 1, W the longer of the first two pieces), up to
MAX_PIECES, while no piece repeats an envelope part the run has (a second container
stamp is a new record), and some piece after the first is one nothing read alone.

The run is joined (a stripped blank put back after a W - 1 piece) and parsed as one line,
with the residue search of logs/residue.py, so a wrapped line behind an unknown prefix
reads too. It is taken when an event reads it from its first piece on (not behind it as
an unknown prefix) and reads something other than the first piece alone did; else the
run is tried with a blank after its widest pieces (with two pieces W is unknown), and
without its last piece (a record that ended at full width runs into the next line). Of
overlapping runs the first wins. Once two runs read as events at one width, that width is
the file's terminal: runs at it that read as a record (a header line, a traceback, a
warning) are taken too, as that record's pieces.

Every join is counted (`rejoined wrapped lines`, `rejoined wrapped records`). The pieces
are lines nothing else read, so a log without wraps costs a few filters.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import FormatPack
from kvdiag.analyzer.ingest.logs.parse import EventRows, parsed_expr
from kvdiag.analyzer.ingest.logs.residue import (
    ANCHORED,
    MIN_REPEATS,
    STAMPS_ONLY,
    parse_alone,
    readings,
)
from kvdiag.analyzer.text.repair import Repairs

MIN_WIDTH = 20  # a narrower terminal is no terminal a log was read in (W - 1: a blank stripped)
MAX_PIECES = 64  # a 600-character record at width 20 is 30 pieces
LEAD = 10  # characters of a piece's start compared with its run's first (_leads)
LABEL = "rejoined wrapped line"
_RUNS = {"start": pl.UInt32, "last": pl.UInt32, "width": pl.Int64}


@dataclass(frozen=True, slots=True)
class Rejoined:
    """The batch with wrapped runs taken, their events, and the prefixes found in them."""

    frame: pl.DataFrame
    events: list[EventRows]
    prefixes: pl.Series
    pieces: pl.Series  # rows the runs took: an event one of them had alone is dropped


def _single(pack: FormatPack) -> pl.Expr:
    """The row holds no event, or one read from this line alone (not a multi-line one)."""
    joined = [e.id for e in pack.events if e.join is not None]
    return pl.col("event").is_null() | ~pl.col("event").is_in(joined)


def _can_continue(frame: pl.DataFrame, pack: FormatPack) -> pl.Series:
    """Rows that may continue the row above: the next physical line, read by no event
    (at a narrow width a piece can look like a header: `INFO 05-12 08:01:39 `), only as
    a bare message of its own (a piece can be one: `# CPU blocks: 2048`) or behind an
    unknown prefix; the joined reading then replaces the piece's."""
    follows = (pl.col("line_no") == pl.col("line_no").shift(1) + 1) & (pl.col("part") == 0)
    bare = ~pl.col("_envelope") & (pl.col("msg") == pl.col("clean")) & _single(pack)
    # A piece read behind an unknown prefix can be the rest of a header a piece above began
    # (`20:53:41 [kv_cache_utils.py:864] GPU KV cache size: ...` after `... INFO 09-24`).
    behind = pl.col("repair").str.contains(ANCHORED, literal=True).fill_null(False)
    ok = follows & (pl.col("event").is_null() | bare | behind)
    if "_gap" in frame.columns:
        ok = ok & ~pl.col("_gap")
    return frame.select(ok.fill_null(False).alias("c"))["c"]


# Envelope parts a record has once: a piece holding one its run already has starts a new
# record (a piece that merely looks like a header holds none the first piece had).
_ONCE = {"cts": 1, "bts": 2, "pod": 4, "proc": 8, "md": 16}


def _once(frame: pl.DataFrame) -> pl.Series:
    """Per row, a bit per envelope part of _ONCE it holds."""
    bits = [pl.col(c).is_not_null().cast(pl.Int64) * b for c, b in _ONCE.items() if c in frame]
    return frame.select(pl.sum_horizontal(bits) if bits else pl.lit(0, pl.Int64)).to_series()


def _starts(
    frame: pl.DataFrame, pack: FormatPack, cont: pl.Series, length: pl.Series, once: pl.Series
) -> pl.Series:
    """Rows a run may start at: a first piece at full width (no shorter than the next
    piece but for a stripped blank), followed by a row that may continue it, holding no
    event or one the piece holds cut short (`# GPU blocks: 5` of `# GPU blocks: 5691`):
    the join must then read something else (_attempt)."""
    nxt = cont.shift(-1, fill_value=False) & ((once & once.shift(-1, fill_value=0)) == 0)
    full = length >= length.shift(-1, fill_value=0) - 1
    cut_short = pl.col("event").is_not_null() & _single(pack)
    first = (pl.col("event").is_null() | cut_short) & (length >= MIN_WIDTH - 1) & full & nxt
    return frame.select(first.fill_null(False)).to_series().arg_true()


def _leads(frame: pl.DataFrame) -> pl.Series:
    """Each row's first LEAD characters, digits masked: a piece that starts the way its
    run's first piece did (the same stamp, prefix or header shape) starts the next record,
    however narrow the terminal (the pieces of one record do not repeat its start)."""
    lead = pl.col("clean").str.slice(0, LEAD).str.replace_all(r"\d", "0")
    return frame.select(lead.alias("lead"))["lead"]


def _runs(
    frame: pl.DataFrame, pack: FormatPack, cont: pl.Series, length: pl.Series
) -> pl.DataFrame:
    """Candidate runs: first and last row, and the width W of their pieces (the longer of
    the first two). A run goes on after each piece at full width (W or W - 1), to a
    piece no wider than W + 1 (with both first pieces stripped, W is one short) that
    holds no envelope part the run has (_ONCE)."""
    n = frame.height
    once = _once(frame)
    leads = _leads(frame)
    # A run's second piece may not start the way its first did (the loop below checks the
    # later ones); two pieces of one record may (` blocks: 7281, # CPU` / ` blocks: 2048`).
    second = cont & (leads != leads.shift(1)).fill_null(True)
    starts = _starts(frame, pack, second, length, once)
    if starts.is_empty():
        return pl.DataFrame(schema=_RUNS)
    width = pl.max_horizontal(length.gather(starts), length.gather(starts + 1))
    going = pl.DataFrame(
        {"start": starts, "last": starts + 1, "width": pl.select(width).to_series()},
        schema=_RUNS,
    ).with_columns((once.gather(starts) | once.gather(starts + 1)).alias("_seen"))
    done = []
    for _ in range(2, MAX_PIECES):
        nxt = (going["last"] + 1).clip(upper_bound=n - 1)
        full = length.gather(going["last"]) >= going["width"] - 1
        fits = length.gather(nxt) <= going["width"] + 1
        new = (once.gather(nxt) & going["_seen"]) == 0
        same_start = leads.gather(nxt) == leads.gather(going["start"])
        ok = full & fits & new & ~same_start & (going["last"] + 1 < n) & cont.gather(nxt)
        done.append(going.filter(~ok))
        going = going.filter(ok).with_columns(
            pl.col("last") + 1, pl.col("_seen") | once.gather(nxt.filter(ok))
        )
        if going.is_empty():
            break
    runs = pl.concat([*done, going]).drop("_seen")
    # A run of lines each read on its own (consecutive header lines) is no wrap.
    bare = pl.col("event").is_not_null() & (pl.col("msg") == pl.col("clean"))
    loose = frame.select(~parsed_expr() | bare).to_series()
    return runs.filter(_count(loose, runs, 1) > 0).sort("start")


def _joined(frame: pl.DataFrame, runs: pl.DataFrame, wider: int) -> pl.DataFrame:
    """Per run its pieces joined (a blank put back after a W - 1 piece, W the widest
    piece plus `wider`) and `raw_lines`."""
    rows = runs.select("_run", pl.int_ranges("start", pl.col("last") + 1, dtype=pl.UInt32))
    rows = rows.explode("start").rename({"start": "row"})
    piece = frame["clean"].gather(rows["row"])
    rows = rows.with_columns(piece.alias("piece"), piece.str.len_chars().alias("n"))
    width = pl.col("n").max().over("_run") + wider
    inner = pl.col("row") < pl.col("row").max().over("_run")
    blank = pl.when(inner & (pl.col("n") == width - 1)).then(pl.lit(" ")).otherwise(pl.lit(""))
    joined = rows.group_by("_run", maintain_order=True).agg(
        (pl.col("piece") + blank).str.join("").alias("joined"),
        pl.col("piece").str.join("\n").alias("raw_lines"),
    )
    return runs.join(joined, on="_run", maintain_order="left")


def _attempt(
    frame: pl.DataFrame, runs: pl.DataFrame, pack: FormatPack, wider: int, reading: pl.Series
) -> tuple[pl.DataFrame, list[EventRows]]:
    """Runs with `ok` (an event reads the joined text from its first piece on, and reads
    something other than the first piece alone did) and `_pre`; the events' rows, with
    `_run`."""
    runs = _joined(frame, runs, wider)
    start = frame.select("line_no", "part", "repair")[runs["start"]]
    label = pl.concat_str([pl.col("repair"), pl.lit(LABEL)], separator="; ", ignore_nulls=True)
    lines = start.with_columns(
        runs["joined"].alias("text"), runs["joined"].alias("clean"), label.alias("repair")
    )
    alone = parse_alone(lines, pack)
    read = alone.frame
    # The text read must start in the first piece, not behind it as an unknown prefix,
    # unless that prefix is only stamps (a CI system's after the container's).
    first_len = frame["clean"].gather(runs["start"]).str.len_chars()
    stamps = read["_pre"].str.contains(STAMPS_ONLY).fill_null(False)
    starts_first = (read["_at"] < first_len) | stamps
    alone_reading = reading.gather(runs["start"])
    joined_reading = readings(runs.height, alone.events, "_row")
    other = alone_reading.is_null() | (alone_reading != joined_reading).fill_null(True)
    ok = read["event"].is_not_null() & starts_first & other
    parsed = read.select(parsed_expr()).to_series() & starts_first
    runs = runs.with_columns(
        ok.alias("ok"),
        parsed.alias("parsed"),
        (first_len >= runs["width"] - 1).alias("full"),
        pl.lit(wider).alias("_wider"),
        read["event"].alias("_event"),
        read["_pre"].alias("_pre"),
    )
    ids = runs["_run"]
    events = [
        EventRows(e.event, e.frame.with_columns(pl.lit(ids).gather(pl.col("_row")).alias("_run")))
        for e in alone.events
    ]
    return runs, events


def _tries(
    frame: pl.DataFrame, runs: pl.DataFrame, pack: FormatPack, reading: pl.Series
) -> tuple[pl.DataFrame, list[EventRows]]:
    """Each run read as it is, then with a stripped blank put back after its widest
    pieces too (with two pieces W is unknown), then both without the last piece: each try
    for the runs no earlier one read."""
    tried, events = _attempt(frame, runs, pack, 0, reading)
    todo = tried.filter(~pl.col("ok"))
    for shorten, wider in ((0, 1), (1, 0), (1, 1)):
        if shorten:
            todo = todo.filter(pl.col("last") > pl.col("start") + 1)
        if todo.is_empty():
            break
        again = todo.select("start", pl.col("last") - shorten, "width")
        again = again.with_row_index("_run", offset=tried.height)  # ids 0.. so far
        more, more_events = _attempt(frame, again, pack, wider, reading)
        tried, events = pl.concat([tried, more]), events + more_events
        ok_starts = more.filter("ok")["start"].implode()
        todo = todo.filter(~pl.col("start").is_in(ok_starts))
    return tried, events


def _first_wins(taken: pl.DataFrame) -> pl.DataFrame:
    """Taken runs that overlap no earlier taken run."""
    taken = taken.sort("start")
    before = pl.col("last").cum_max().shift(1)
    return taken.filter(before.is_null() | (pl.col("start") > before))


def rejoin_wrapped(
    frame: pl.DataFrame, pack: FormatPack, repairs: Repairs, reading: pl.Series
) -> Rejoined:
    """Join wrapped runs back where an event then reads them (the module docstring);
    `reading`: what each row's event read alone (residue.readings)."""
    none = Rejoined(frame, [], pl.Series("_pre", [], pl.String), pl.Series([], dtype=pl.UInt32))
    if frame.height < 2:
        return none
    length = frame.select(pl.col("clean").str.len_chars()).to_series()
    runs = _runs(frame, pack, _can_continue(frame, pack), length)
    if runs.is_empty():
        return none
    tried, events = _tries(frame, runs.with_row_index("_run"), pack, reading)
    kept = _first_wins(tried.filter("ok"))
    if kept.is_empty():
        return none
    frame = _take_records(frame, kept, tried, repairs)
    return _take(frame, kept, events, repairs)


def _learned_widths(kept: pl.DataFrame) -> pl.Series:
    """Terminal widths that two or more runs read as events show: the file's own."""
    counts = kept.group_by("width").len()
    return counts.filter(pl.col("len") >= MIN_REPEATS)["width"]


def _take_records(
    frame: pl.DataFrame, kept: pl.DataFrame, tried: pl.DataFrame, repairs: Repairs
) -> pl.DataFrame:
    """Runs at a learned width that read as a record (a header line, a traceback, a
    warning) though no event: their pieces are parsed too, as that record's."""
    widths = _learned_widths(kept)
    if widths.is_empty():
        return frame
    cand = tried.filter(
        ~pl.col("ok") & pl.col("parsed") & pl.col("full") & (pl.col("_wider") == 0),
        pl.col("width").is_in(widths.implode()),
        pl.col("last") > pl.col("start"),
    )
    covered = pl.Series([False] * frame.height).scatter(_pieces(kept), True)
    # A piece that reads alone (a header line, a record) is a line of its own.
    alone = frame.select(parsed_expr()).to_series()
    free = (_count(covered, cand, 0) == 0) & (_count(alone, cand, 1) == 0)
    taken = _first_wins(cand.filter(free).unique("start", keep="first", maintain_order=True))
    if taken.is_empty():
        return frame
    at = _pieces(taken)
    frame = frame.with_columns(
        frame["_envelope"].scatter(at, True), frame["near_miss"].scatter(at, False)
    )
    lines = frame["line_no"]
    spans = zip(lines.gather(taken["start"]), lines.gather(taken["last"]), strict=True)
    repairs.add("rejoined wrapped records", [f"{a}-{b}" for a, b in spans])
    return frame


def _count(mask: pl.Series, runs: pl.DataFrame, skip: int) -> pl.Series:
    """Per run, the rows of `mask` among its pieces after the first `skip`."""
    total = pl.concat([pl.Series([0], dtype=pl.Int64), mask.cast(pl.Int64).cum_sum()])
    return total.gather(runs["last"] + 1) - total.gather(runs["start"] + skip)


def _pieces(runs: pl.DataFrame) -> pl.Series:
    """The rows of the runs' pieces."""
    rows = runs.select(pl.int_ranges("start", pl.col("last") + 1, dtype=pl.UInt32).alias("at"))
    return rows.explode("at")["at"]


def _take(
    frame: pl.DataFrame, kept: pl.DataFrame, events: list[EventRows], repairs: Repairs
) -> Rejoined:
    """Mark the pieces of the kept runs with their event; finish the events' rows."""
    ends = kept.select("_run", frame["line_no"].gather(kept["last"]).alias("line_end"), "raw_lines")
    out = []
    for rows in events:
        got = rows.frame.drop("line_end", "raw_lines").join(ends, on="_run", how="inner")
        if got.height:
            out.append(EventRows(rows.event, got))
    span = pl.col("last") - pl.col("start") + 1
    pieces = kept.select(
        pl.int_ranges("start", pl.col("last") + 1, dtype=pl.UInt32).alias("at"),
        pl.col("_event").repeat_by(span),
    ).explode("at", "_event")
    frame = frame.with_columns(
        frame["event"].scatter(pieces["at"], pieces["_event"]),
        frame["near_miss"].scatter(pieces["at"], False),
        frame["record"].scatter(pieces["at"], None),
    )
    lines = frame["line_no"]
    spans = zip(lines.gather(kept["start"]), lines.gather(kept["last"]), strict=True)
    repairs.add("rejoined wrapped lines", [f"{a}-{b}" for a, b in spans])
    behind = kept.filter(pl.col("_pre").is_not_null())["start"]
    repairs.add(f"lines {ANCHORED}", [str(n) for n in lines.gather(behind).to_list()])
    return Rejoined(frame, out, kept["_pre"].drop_nulls(), pieces["at"])
