"""Read a text file as batches of numbered lines, in bounded memory.

A line ends at `\\n` (so numbers agree with `grep -n` and editors; a bare `\\r` from a
progress bar stays inside its line, a `\\r\\n` ending is dropped). The file is read in
blocks of bytes (`iter_chunks`), each cut at a line end, and a block becomes a frame of
lines in one call to polars' CSV reader (`frame_lines`), so no Python runs per line.

Damage is read up to where it starts and reported, never raised: decoding (gzip by
content, UTF-16, GBK) is in text/source.py, cutting blocks at line ends (overlong and
unterminated lines) in text/chunks.py. Invalid UTF-8 bytes become U+FFFD and the caller
counts the line as undecodable unless it parses.

Rotated sets (`vllm.log`, `vllm.log.1`, `vllm.log.2.gz`) share a base name; the highest
number is the oldest, so reading them in `chronological` order merges them by time.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl

from kvdiag.analyzer.text.chunks import Chunk, iter_chunks
from kvdiag.analyzer.text.source import ReadStats, open_binary, read_head

# The readers' names, importable from here.
__all__ = [
    "BATCH_BYTES",
    "Chunk",
    "ReadStats",
    "chronological",
    "frame_lines",
    "iter_chunks",
    "iter_line_batches",
    "line_of",
    "open_binary",
    "read_head",
    "rotation_base",
]

# 8 MB of text a batch: a fraction of a second's parse, and two in flight (one per core)
# plus the one being read stay far below the memory budget.
BATCH_BYTES = 8 << 20
# polars' CSV reader splits lines fast; we give it a column separator that cannot occur
# (it is replaced before parsing) so each line lands whole in one column.
_SEP = b"\x1f"
# Leading bytes polars takes for gzip, zlib or zstd data (it sniffs them and inflates).
_COMPRESSED_MAGIC = (b"\x1f\x8b", b"x\x01", b"x^", b"x\x9c", b"x\xda", b"\x28\xb5\x2f\xfd")
_ROTATED = re.compile(r"^(?P<base>.+?)(?:\.(?P<n>\d{1,4}))?(?P<gz>\.gz)?$")


def line_of(block: bytes, index: int) -> str | None:
    """The `index`-th line (from 0) of a block of whole lines, as `frame_lines` reads it:
    the column separator a space, a `\\r\\n` ending dropped, invalid UTF-8 as U+FFFD.
    None when the block has fewer lines."""
    start = 0
    for _ in range(index):
        start = block.find(b"\n", start) + 1
        if start == 0:
            return None
    end = block.find(b"\n", start)
    line = block[start : end if end >= 0 else len(block)]
    if not line and end < 0:
        return None
    text = line.replace(_SEP, b" ").decode("utf-8", errors="replace")
    return text.removesuffix("\r")


def frame_lines(chunk: bytes, first_line: int, lines: int | None = None) -> pl.DataFrame:
    """Columns `line_no` (from `first_line`) and `text`, one row per `\\n`-ended line.

    With `lines`, only the first `lines` rows are kept (the chunk may run on past them).
    """
    if _SEP in chunk:
        chunk = chunk.replace(_SEP, b" ")
    # polars sniffs leading gzip/zlib/zstd magic ('x^' is a zlib header) and would inflate the
    # text: a leading empty line, dropped again below, keeps it reading text.
    skip = 1 if chunk.startswith(_COMPRESSED_MAGIC) else 0
    frame = pl.read_csv(
        io.BytesIO(b"\n" + chunk if skip else chunk),
        has_header=False,
        separator=_SEP.decode(),
        quote_char=None,
        new_columns=["text"],
        schema={"text": pl.String},
        encoding="utf8-lossy",
    )
    frame = frame.slice(skip, lines)
    return (
        frame.with_columns(pl.col("text").fill_null(""))
        .with_row_index("line_no", offset=first_line)
        .with_columns(pl.col("line_no").cast(pl.Int64))
    )


def iter_line_batches(
    path: Path, stats: ReadStats | None = None, batch_bytes: int = BATCH_BYTES
) -> Iterator[pl.DataFrame]:
    """Yield frames with columns `line_no` (1-based) and `text`, batch by batch."""
    for chunk in iter_chunks(path, stats, batch_bytes):
        yield frame_lines(chunk.data, chunk.first_line, chunk.lines)


def rotation_base(rel: str) -> str | None:
    """The base path of a rotated or compressed log (`a/vllm.log.2.gz` -> `a/vllm.log`)."""
    folder, _, name = rel.rpartition("/")
    m = _ROTATED.match(name)
    if m is None or (m["n"] is None and m["gz"] is None):
        return None
    return f"{folder}/{m['base']}" if folder else m["base"]


def _rotation_index(rel: str) -> int:
    m = _ROTATED.match(rel.rpartition("/")[2])
    return int(m["n"]) if m is not None and m["n"] is not None else 0


def chronological(files: Sequence[Path], rels: Sequence[str]) -> list[tuple[Path, str]]:
    """Members of a rotated set, oldest first (`.2.gz`, `.1`, then the live file)."""
    pairs = list(zip(files, rels, strict=True))
    return sorted(pairs, key=lambda pr: (-_rotation_index(pr[1]), pr[1]))
