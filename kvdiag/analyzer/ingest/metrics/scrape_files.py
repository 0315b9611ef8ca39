"""Many small scrape files read as one frame of lines, so parsing runs once per batch.

A day of 1-s scrapes is 86,400 files. Reading each into its own frame would spend the time
in per-file overhead; instead the files of a batch are concatenated and split into lines by
polars' CSV reader in one call, and each line is located (file, line number) afterwards
from the per-file line counts, only for the rows that need it.
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import polars as pl

from kvdiag.analyzer.ingest.metrics.scrape_time import scrape_time_from_name
from kvdiag.analyzer.text.lines import frame_lines
from kvdiag.analyzer.text.prefetch import announce
from kvdiag.analyzer.text.source import GZIP_MAGIC

BATCH_BYTES = 32 << 20

_EMPTY = pl.DataFrame(schema={"row": pl.Int64, "text": pl.String})


@dataclass(frozen=True, slots=True)
class LineBatch:
    """The lines of several files: `lines` (row, text), plus where each file starts."""

    lines: pl.DataFrame
    rels: tuple[str, ...]  # path of each file, relative to the incident folder
    starts: pl.Series  # Int64: first row of each file
    name_times: pl.Series  # Datetime: scrape time from each file's name (null if none)
    problems: tuple[str, ...]

    def locate(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Add `f` (file index), `source_path` and `source_line` (1-based) from `row`."""
        f = (self.starts.search_sorted(frame["row"], side="right") - 1).cast(pl.Int64)
        files = pl.DataFrame(
            {
                "f": pl.int_range(len(self.rels), eager=True).cast(pl.Int64),
                "source_path": pl.Series(self.rels, dtype=pl.String),
                "_start": self.starts,
                "name_ts": self.name_times,
            }
        )
        return (
            frame.with_columns(f.alias("f"))
            .join(files, on="f", how="left", maintain_order="left")
            .with_columns((pl.col("row") - pl.col("_start") + 1).alias("source_line"))
            .drop("_start")
        )


def read_batch(paths: Sequence[Path], rels: Sequence[str]) -> LineBatch:
    """Read files (gzip transparently) into one LineBatch; unreadable files become problems."""
    chunks: list[bytes] = []
    problems: list[str] = []
    for path, rel in zip(paths, rels, strict=True):
        try:
            data = _read(path)
        except (OSError, EOFError, zlib.error) as exc:
            data = b""
            problems.append(f"{rel}: unreadable: {exc}")
        if data and not data.endswith(b"\n"):
            data += b"\n"
        chunks.append(data)
    blob = b"".join(chunks)
    sizes = [len(c) for c in chunks]
    # The files' bytes go before the lines are split: a batch's bytes twice over and its
    # lines at once were the peak of a day of scrapes.
    del chunks
    lines = _split_lines(blob)
    times = pl.Series(
        "name_ts", [scrape_time_from_name(r.rpartition("/")[2]) for r in rels], pl.Datetime("us")
    )
    return LineBatch(
        _without_cr(lines, blob),
        tuple(rels),
        _file_starts(lines, blob, sizes),
        times,
        tuple(problems),
    )


def _read(path: Path) -> bytes:
    # One open per file (not a sniff then a read): a day of scrapes is 86,400 opens.
    # Unbuffered, the file is read whole in one call; Path.read_bytes' buffered reader is
    # several times slower on small files.
    with open(path, "rb", buffering=0) as file:
        data = file.read()
    data = gzip.decompress(data) if data[:2] == GZIP_MAGIC else data
    # A UTF-8 byte-order mark would stick to the first line (`\ufeff# HELP ...`) and make
    # it unmatched, except in the first file of a batch, where the line reader drops it.
    return data.removeprefix(codecs.BOM_UTF8)


def _split_lines(blob: bytes) -> pl.DataFrame:
    return frame_lines(blob, 0).rename({"line_no": "row"}) if blob else _EMPTY


def _without_cr(lines: pl.DataFrame, blob: bytes) -> pl.DataFrame:
    if b"\r" in blob:
        return lines.with_columns(pl.col("text").str.strip_chars_end("\r"))
    return lines


def _file_starts(lines: pl.DataFrame, blob: bytes, file_sizes: list[int]) -> pl.Series:
    """The first row of each file: from where each line ends when the lines hold the files'
    bytes exactly, else by counting newlines (a second pass over every byte).

    The reader drops the `\r` of `\r\n` and a leading byte-order mark, and replaces each
    invalid UTF-8 sequence (1 to 3 bytes) with U+FFFD (3 bytes). Without the first two,
    no line is shorter than its bytes, so equal totals mean every line is exact.
    """
    ends = (lines["text"].str.len_bytes().cast(pl.Int64) + 1).cum_sum()
    sizes = pl.Series(file_sizes, dtype=pl.Int64)
    offsets = sizes.cum_sum() - sizes
    exact = b"\r" not in blob and not blob.startswith(codecs.BOM_UTF8)
    if exact and (ends[-1] if ends.len() else 0) == len(blob):
        return ends.search_sorted(offsets, side="right").cast(pl.Int64).rename("starts")
    ranges = zip(offsets, file_sizes, strict=True)
    counts = pl.Series([blob.count(b"\n", o, o + n) for o, n in ranges], dtype=pl.Int64)
    return (counts.cum_sum() - counts).rename("starts")


class FileGroup(NamedTuple):
    """Files read as one batch: their indices and their size on disk."""

    indices: list[int]
    size: int


def batches(files: Sequence[Path], batch_bytes: int = BATCH_BYTES) -> Iterator[FileGroup]:
    """Indices of `files`, grouped so that each group holds about `batch_bytes`.

    Each file is announced to the kernel as it is grouped (prefetch.announce), so that an
    uncached batch is read from the disk while the one before is parsed; cached, the open
    is cheap, and it is paid on the thread that groups them, not the reader's.
    """
    group: list[int] = []
    size = 0
    for i, path in enumerate(files):
        group.append(i)
        size += announce(path)  # a batch before a worker reads it
        if size >= batch_bytes:
            yield FileGroup(group, size)
            group, size = [], 0
    if group:
        yield FileGroup(group, size)
