"""Repairs of lines damaged on their way to the user, only where the shape makes it certain.

- Glued records: a terminal copy or a lost newline puts two records on one line
  (`...hit rate: 0.0%INFO 07-28 06:41:19 [loggers.py:118] ...`). A vLLM logger header
  glued to a non-space character is split off; both pieces keep the physical line number
  (`part` 0, 1, ...).
- Wrapped lines: a terminal wraps a long record (`...Running: 32 r` / `eqs, Swapped: ...`).
  A header-less, otherwise unknown line is joined to the record before it only when the
  joined text matches an event variant that neither piece matched alone.
- Interleaved writers: with TP>1 one process prints its prefix, another its whole line,
  and the first one's message follows without prefix. The stacked outer prefix is given
  to the prefix-less record on the next line.

Every repair is counted and the rows it produced say so in their `repair` column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import Event, FormatPack
from kvdiag.analyzer.ingest.logs.parse import EventRows, extract_fields, variant_index

_LEVEL = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)"
_HEADER = (
    rf"(?:\([^()]+ pid=\d+[^()]*\) )?{_LEVEL} "
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+\.py:\d+\] "
)
GLUED = rf"\S{_HEADER}"  # a logger header right after a non-blank character
# The head must hold whitespace: `[vllm]INFO ...` is a VLLM_LOGGING_PREFIX, not a glued record.
_SPLIT = rf"^(?P<head>.*?\s.*?\S)(?P<tail>{_HEADER}.*)$"
MAX_GLUED = 4  # records split off one line at most
EXAMPLES = 5


@dataclass
class Repairs:
    """Counts and example line numbers of each kind of repair, across batches."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, where: list[str]) -> None:
        if not where:
            return
        self.counts[kind] = self.counts.get(kind, 0) + len(where)
        seen = self.examples.setdefault(kind, [])
        seen += where[: EXAMPLES - len(seen)]

    def merge(self, other: Repairs) -> None:
        """Add the repairs of a later batch."""
        for kind, n in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
            seen = self.examples.setdefault(kind, [])
            seen += other.examples.get(kind, [])[: EXAMPLES - len(seen)]

    def notes(self) -> list[str]:
        return [
            f"{kind}: {n} (lines {', '.join(self.examples[kind])}{', ...' if n > EXAMPLES else ''})"
            for kind, n in sorted(self.counts.items())
        ]


def split_glued(batch: pl.DataFrame, repairs: Repairs) -> pl.DataFrame:
    """Rows `line_no, part, text, clean, repair`: glued records split into parts of a line.

    Works on `clean` (colour codes removed); a split piece's text is its clean text.
    """
    frame = batch.with_columns(
        pl.lit(0, pl.Int32).alias("part"), pl.lit(None, pl.String).alias("repair")
    )
    glued = frame.filter(pl.col("clean").str.contains(GLUED))
    if glued.is_empty():
        return frame
    pieces, rest = [], glued.select("line_no", pl.col("clean").alias("text"))
    for part in range(MAX_GLUED + 1):
        cut = pl.col("_s").struct.field("head").is_not_null()
        rest = rest.with_columns(pl.col("text").str.extract_groups(_SPLIT).alias("_s"))
        done = rest.filter(~cut) if part < MAX_GLUED else rest
        pieces.append(done.select("line_no", "text", pl.lit(part, pl.Int32).alias("part")))
        rest = rest.filter(cut) if part < MAX_GLUED else rest.clear()
        if rest.is_empty():
            break
        head = pl.col("_s").struct.field("head").alias("text")
        pieces.append(rest.select("line_no", head, pl.lit(part, pl.Int32).alias("part")))
        rest = rest.select("line_no", pl.col("_s").struct.field("tail").alias("text"))
    rows = pl.concat(pieces)
    lines = rows.filter(pl.col("part") > 0)["line_no"].unique().sort()
    if lines.is_empty():
        return frame
    repairs.add("split glued records", [str(n) for n in lines.to_list()])
    split_rows = rows.filter(pl.col("line_no").is_in(lines.implode())).with_columns(
        pl.col("text").alias("clean"), pl.lit("split glued line").alias("repair")
    )
    keep = frame.filter(~pl.col("line_no").is_in(lines.implode()))
    return pl.concat([keep, split_rows.select(keep.columns)]).sort("line_no", "part")


def attribute_interleaved(frame: pl.DataFrame, repairs: Repairs) -> pl.DataFrame:
    """Give a prefix-less record the outer of the two prefixes stacked on the line before."""
    if "proc_outer" not in frame.columns:
        return frame
    prev_outer = pl.col("proc_outer").shift(1)
    target = prev_outer.is_not_null() & pl.col("proc").is_null() & pl.col("md").is_not_null()
    if "_gap" in frame.columns:
        target = target & ~pl.col("_gap")
    hits = frame.select(target.alias("t"))["t"]
    if not hits.any():
        return frame
    repairs.add(
        "interleaved prefixes attributed", [str(n) for n in frame.filter(hits)["line_no"].to_list()]
    )
    return frame.with_columns(
        pl.when(target).then(prev_outer).otherwise(pl.col("proc")).alias("proc"),
        pl.when(target).then(pl.col("pid_outer").shift(1)).otherwise(pl.col("pid")).alias("pid"),
        pl.when(target)
        .then(pl.lit("attributed interleaved prefix"))
        .otherwise(pl.col("repair"))
        .alias("repair"),
    )


def rejoin_wrapped(
    frame: pl.DataFrame, pack: FormatPack, repairs: Repairs
) -> tuple[pl.DataFrame, list[EventRows]]:
    """Join terminal-wrapped records back together where an event then matches."""
    out: list[EventRows] = []
    for span in (1, 2):
        frame, found = _rejoin(frame, pack, span, repairs)
        out += found
    return frame, out


def _free_continuation(frame: pl.DataFrame, offset: int) -> pl.Series:
    """Rows whose next `offset` rows are header-less lines that nothing matched."""
    ok = pl.lit(True)
    gap = "_gap" in frame.columns
    for k in range(1, offset + 1):
        ok = ok & _unclaimed(k)
        if gap:  # a row after a missing line continues nothing
            ok = ok & ~pl.col("_gap").shift(-k).fill_null(True)
    head = pl.col("md").is_not_null() & pl.col("event").is_null()
    return frame.select((head & ok).fill_null(False).alias("c"))["c"]


def _unclaimed(k: int) -> pl.Expr:
    """The row k below is a header-less line that no prefix, event or record claimed."""

    def nxt(c: str) -> pl.Expr:
        return pl.col(c).shift(-k)

    ok = nxt("md").is_null() & ~nxt("_envelope").fill_null(True) & nxt("proc").is_null()
    ok = ok & ~nxt("_gap").fill_null(True)
    ok = ok & nxt("event").is_null() & ~nxt("near_miss").fill_null(True)
    return ok & (nxt("line_no") > pl.col("line_no"))


def _rejoin(
    frame: pl.DataFrame, pack: FormatPack, span: int, repairs: Repairs
) -> tuple[pl.DataFrame, list[EventRows]]:
    starts = frame.filter(_free_continuation(frame, span))
    if starts.is_empty():
        return frame, []
    n = frame.height
    tails = [f"_t{k}" for k in range(1, span + 1)]
    starts = starts.with_columns(
        frame["clean"].gather((starts["_i"] + k).clip(upper_bound=n - 1)).alias(t)
        for k, t in enumerate(tails, 1)
    )
    out = []
    for sep in ("", " "):
        joined = pl.concat_str(["msg", *tails], separator=sep)
        lines = pl.concat_str(["clean", *tails], separator="\n")
        cand = starts.with_columns(joined.alias("msg"), lines.alias("raw_lines")).drop(tails)
        for event in pack.events:
            hits = _hits(cand, event)
            if hits.is_empty():
                continue
            frame, rows = _take(frame, hits, event, span, repairs)
            out.append(rows)
            cand = cand.filter(~pl.col("_i").is_in(hits["_i"].implode()))
        starts = starts.filter(pl.col("_i").is_in(cand["_i"].implode()))
    return frame, out


def _hits(cand: pl.DataFrame, event: Event) -> pl.DataFrame:
    cand = cand.filter(pl.col("msg").str.contains(event.literal, literal=True))
    if cand.is_empty():
        return cand
    return cand.with_columns(variant_index(event).alias("_variant")).filter(
        pl.col("_variant").is_not_null()
    )


def _take(
    frame: pl.DataFrame, hits: pl.DataFrame, event: Event, span: int, repairs: Repairs
) -> tuple[pl.DataFrame, EventRows]:
    rows = pl.concat([hits["_i"] + k for k in range(span + 1)])
    line_end = frame["line_no"].gather(hits["_i"] + span)
    frame = frame.with_columns(
        frame["event"].scatter(rows, event.id), frame["near_miss"].scatter(rows, False)
    )
    label = pl.concat_str(
        [pl.col("repair"), pl.lit("rejoined wrapped line")], separator="; ", ignore_nulls=True
    )
    hits = hits.with_columns(line_end.alias("line_end"), label.alias("repair"))
    repairs.add(
        "rejoined wrapped lines",
        [f"{a}-{b}" for a, b in zip(hits["line_no"], line_end, strict=True)],
    )
    return frame, EventRows(event, extract_fields(hits, event))
