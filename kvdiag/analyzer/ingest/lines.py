"""Read a text file as batches of numbered lines, in bounded memory.

A line ends at `\\n` (so numbers agree with `grep -n` and editors; a bare `\\r` from a
progress bar stays inside its line). Gzip files are read transparently. Invalid UTF-8
bytes become U+FFFD and the line is counted as undecodable by the caller.

Rotated sets (`vllm.log`, `vllm.log.1`, `vllm.log.2.gz`) share a base name; the highest
number is the oldest, so reading them in `chronological` order merges them by time.
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import polars as pl

# ~100k lines a batch: a parsed batch holds a dozen columns per line, so this keeps a log
# parse near 400 MB resident (32 MB batches: about 1 GB) at the same speed.
BATCH_BYTES = 8 << 20
# polars' CSV reader splits lines fast; we give it a column separator that cannot occur
# (it is replaced before parsing) so each line lands whole in one column.
_SEP = b"\x1f"
_GZIP_MAGIC = b"\x1f\x8b"
_ROTATED = re.compile(r"^(?P<base>.+?)(?:\.(?P<n>\d{1,4}))?(?P<gz>\.gz)?$")


@dataclass
class ReadStats:
    """What the reader saw beyond the lines themselves."""

    truncated: str | None = None  # why the stream ended early (corrupt gzip ...)
    encoding: str = "utf-8"


def is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def open_binary(path: Path) -> BinaryIO:
    """Open a file for reading bytes, decompressing gzip by content, not by name."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


def read_head(path: Path, size: int = 65536) -> bytes:
    """The first bytes of a file (decompressed), for sniffing; never raises on bad gzip."""
    try:
        with open_binary(path) as fh:
            return fh.read(size)
    except (OSError, EOFError, zlib.error):
        with path.open("rb") as fh:
            return fh.read(size)


def _frame(chunk: bytes, first_line: int) -> pl.DataFrame:
    if _SEP in chunk:
        chunk = chunk.replace(_SEP, b" ")
    frame = pl.read_csv(
        io.BytesIO(chunk),
        has_header=False,
        separator=_SEP.decode(),
        quote_char=None,
        new_columns=["text"],
        schema={"text": pl.String},
        encoding="utf8-lossy",
    )
    return (
        frame.with_columns(pl.col("text").fill_null(""))
        .with_row_index("line_no", offset=first_line)
        .with_columns(pl.col("line_no").cast(pl.Int64))
    )


def _decode_utf16(data: bytes) -> bytes:
    """Re-encode a UTF-16 file (detected by its BOM) as UTF-8."""
    return codecs.decode(data, "utf-16").encode("utf-8")


def iter_line_batches(
    path: Path, stats: ReadStats | None = None, batch_bytes: int = BATCH_BYTES
) -> Iterator[pl.DataFrame]:
    """Yield frames with columns `line_no` (1-based) and `text`, batch by batch."""
    stats = stats if stats is not None else ReadStats()
    next_line = 1
    carry = b""
    first = True
    with open_binary(path) as fh:
        while True:
            try:
                block = fh.read(batch_bytes)
            except (OSError, EOFError, zlib.error) as exc:
                stats.truncated = f"stream ends early: {exc}"
                block = b""
            if first:
                first = False
                if block.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                    # UTF-16 logs (Windows consoles) are small; decode them whole.
                    block = _decode_utf16(block + fh.read())
                    stats.encoding = "utf-16"
                elif block.startswith(codecs.BOM_UTF8):
                    block = block[len(codecs.BOM_UTF8) :]
            if not block:
                break
            data = carry + block
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry = data[cut + 1 :]
            frame = _frame(data[: cut + 1], next_line)
            next_line += frame.height
            yield frame
    if carry:
        yield _frame(carry + b"\n", next_line)


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
