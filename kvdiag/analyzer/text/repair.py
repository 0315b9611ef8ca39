"""Repairs of lines damaged on their way to the user, only where the shape makes it certain.

- Glued records: a terminal copy or a lost newline puts two records on one line
  (`...hit rate: 0.0%INFO 07-28 06:41:19 [loggers.py:118] ...`). A vLLM logger header
  glued to a non-space character is split off; both pieces keep the physical line number
  (`part` 0, 1, ...).
- Wrapped lines: a terminal wraps a long record (`...Running: 32 r` / `eqs, Swapped: ...`);
  joined back in logs/wraps.py, which parses the joined text, so it lives with the parse.
- Interleaved writers: with TP>1 one process prints its prefix, another its whole line,
  and the first one's message follows without prefix. The stacked outer prefix is given
  to the prefix-less record on the next line.

Every repair is counted and the rows it produced say so in their `repair` column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

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
