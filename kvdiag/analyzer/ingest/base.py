"""The ingester contract.

An ingester reads one input unit (a file, or a series of scrape files) and yields, in
order: table batches (polars frames carrying provenance), input problems, and exactly one
final `Account` of its lines. It never touches the database: the pipeline hands its
batches to the store. Ingesters are independent of each other, so units can be read in
parallel.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import ClassVar, overload

import polars as pl

from kvdiag.analyzer.ingest.packed import PackedStrings
from kvdiag.analyzer.schema.metrics import SERIES_HEAD, SERIES_HINT
from kvdiag.analyzer.schema.sample_tail import TAIL, whole_line
from kvdiag.domain.records.diagnosis import InputProblem, UnmatchedTemplate


class FileList(Sequence[Path]):
    """A unit's files, kept as packed strings and made Paths one at a time when asked for.

    A day of one-second scrapes is one unit of 86,400 files: Path objects (with the parts
    they cache) are several times the size of their strings, and loose strings keep more
    memory from being returned than their size (packed.py).
    """

    __slots__ = ("_paths",)

    def __init__(self, paths: Iterable[Path | str]) -> None:
        self._paths = PackedStrings(os.fspath(p) for p in paths)

    @overload
    def __getitem__(self, index: int) -> Path: ...
    @overload
    def __getitem__(self, index: slice) -> FileList: ...
    def __getitem__(self, index: int | slice) -> Path | FileList:
        if isinstance(index, slice):
            return FileList(self._paths[index])
        return Path(self._paths[index])

    def __len__(self) -> int:
        return len(self._paths)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return self._paths == [os.fspath(p) for p in other]

    def __hash__(self) -> int:  # as the tuple of Paths it equals
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"FileList({list(self._paths)!r})"


@dataclass(frozen=True, slots=True)
class InputUnit:
    """What one ingester reads: usually one file; a scrape series is many."""

    kind: str
    rel: str  # POSIX path relative to the incident folder (a folder for a series)
    files: Sequence[Path]  # a FileList from discovery; any sequence of paths will do
    rels: Sequence[str]  # relative path of each file (PackedStrings from discovery)
    size_bytes: int
    replica: str  # default replica name: the folder it sits in, else the file stem


@dataclass(frozen=True, slots=True)
class IngestContext:
    """What an ingester may know beyond its own file."""

    root: Path
    year: int | None  # from --year
    anchor: datetime | None  # absolute time seen elsewhere in the folder (scrape names ...)
    anchor_source: str | None
    # (bytes, lines) of the unit read so far: long inputs report as they go (stderr on a TTY)
    progress: Callable[[int, int], None] | None = None
    # The store is temporary and the files stay while it is read: the lines of the largest
    # tables may be stored by reference (raw NULL, the file's blocks in line_blocks).
    text_by_reference: bool = False


@dataclass(frozen=True, slots=True)
class TableBatch:
    """Rows for one store table."""

    table: str
    frame: pl.DataFrame
    # metric_samples only, optional: what names each row's series, a row per SERIES_HINT
    # (the series columns and SERIES_HEAD), so that `frame` need not repeat it per sample.
    series: pl.DataFrame | None = None

    def rows(self) -> pl.DataFrame:
        """The rows as their table reads back: each with its series' columns, no hints."""
        frame = self.frame
        if self.series is not None:
            frame = frame.join(self.series, on=SERIES_HINT, how="left", maintain_order="left")
        if TAIL in frame.columns:
            frame = frame.with_columns(whole_line(pl.col(SERIES_HEAD)).alias("raw")).drop(TAIL)
        return frame.drop(SERIES_HINT, SERIES_HEAD, strict=False)


@dataclass(frozen=True, slots=True)
class Account:
    """Line accounting for one file or scrape series.

    parsed + unmatched + undecodable = total.
    """

    path: str
    lines_total: int
    lines_parsed: int
    lines_unmatched: int
    lines_undecodable: int = 0
    records: int = 0
    notes: tuple[str, ...] = ()
    templates: tuple[UnmatchedTemplate, ...] = ()

    def balanced(self) -> bool:
        return self.lines_parsed + self.lines_unmatched + self.lines_undecodable == (
            self.lines_total
        )


Emit = TableBatch | InputProblem | Account


class Ingester(ABC):
    """Reads one kind of input. Subclasses declare their kind and the tables they fill."""

    kind: ClassVar[str]
    description: ClassVar[str]
    tables: ClassVar[tuple[str, ...]]
    # Ingesters that read a file whole (JSON documents, small configs) declare the largest
    # they accept; discovery sets larger files aside with the reason. None: streamed.
    max_bytes: ClassVar[int | None] = None
    # Sniffing may parse the file's head (log ingesters looking for a quoted fragment's
    # events): discovery asks these last, telling them the score they have to beat.
    sniff_parses: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def sniff(cls, name: str, head: str) -> int:
        """How sure this ingester is that the file is its kind: 0 no, 1-100 yes."""

    @classmethod
    def sniff_bound(cls, name: str, head: str) -> int:
        """The most `sniff` could say, found cheaply: discovery does not sniff a file with
        an ingester whose bound another's score already beats."""
        return 100

    @classmethod
    def quotes(cls, name: str, head: str) -> bool:
        """The file only quotes this kind's messages (a ticket, notes) without records of
        its own. Discovery sets it aside when the incident holds the log itself."""
        return False

    @classmethod
    def series_key(cls, rel: str) -> str | None:
        """Files sharing a key are read together as one unit (scrape series)."""
        return None

    @classmethod
    def time_hint(cls, rel: str) -> datetime | None:
        """An absolute time the file's name alone gives (scrape series), for dating logs."""
        return None

    @classmethod
    def content_time_hint(cls, head: str) -> datetime | None:
        """An absolute time the file's first bytes give (scraper logs, marker lines)."""
        return None

    @abstractmethod
    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        """Yield batches and problems, and one Account per file (or one for a series)."""


@dataclass
class Tally:
    """Mutable line counters an ingester keeps while it reads."""

    total: int = 0
    parsed: int = 0
    unmatched: int = 0
    undecodable: int = 0
    records: int = 0
    notes: list[str] = field(default_factory=list)

    def account(self, path: str, templates: tuple[UnmatchedTemplate, ...] = ()) -> Account:
        return Account(
            path,
            self.total,
            self.parsed,
            self.unmatched,
            self.undecodable,
            self.records,
            tuple(self.notes),
            templates,
        )


def template_expr(col: str = "text", limit: int = 160) -> pl.Expr:
    """The shape of a line (numbers, hex and ids masked), so similar unmatched lines group."""
    return (
        pl.col(col)
        .str.slice(0, limit)
        .str.replace_all(r"0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*", "<N>")
        .str.replace_all(r"\d+(?:[.,:]\d+)*", "<N>")
    )
