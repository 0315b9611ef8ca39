"""nvidia-smi output: the default table, `--query-gpu` / `--query-compute-apps` CSV, `-q -x` XML.

A file may mix them (a script that runs `--query-gpu`, prints `---PROCS---`, then runs
`--query-compute-apps`) and may hold several snapshots. Each line is read in turn: blank
lines, timestamps, shell prompts and command lines, section separators, table lines and CSV
lines are parsed; anything else is counted unmatched.

Time of a snapshot, in order of preference: a timestamp column of its CSV rows; a time
line printed just before it (nvidia-smi's own date header, `date` output, an ISO 8601 or
Unix time line, a `watch` header); for a file holding a single snapshot, a time in the
file name (`gpu-1795959281.txt`, `nvsmi-20260506-222535.txt`). File modification times are
not used: copying an incident folder resets them. Times without a zone are kept as printed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from kvdiag.analyzer.ingest.base import Emit, IngestContext, Ingester, InputUnit, TableBatch, Tally
from kvdiag.analyzer.ingest.gpu import xml_log
from kvdiag.analyzer.ingest.gpu.query_csv import CsvReader, header_fields
from kvdiag.analyzer.ingest.gpu.snapshots import WATCH, SnapshotBook, ctime, timestamp_of
from kvdiag.analyzer.ingest.gpu.table import TableReader
from kvdiag.analyzer.ingest.metrics.exposition_parse import without_exposition_lines
from kvdiag.analyzer.ingest.rows import clean_raw, frame_for, templates
from kvdiag.analyzer.schema import table
from kvdiag.analyzer.text.lines import ReadStats, iter_line_batches
from kvdiag.domain.records.diagnosis import InputProblem

_COMMAND = re.compile(
    r"^(?P<prefix>.*?)(?:sudo\s+)?(?:\S*[/\\])?nvidia-smi(?:\.exe)?(?P<args>(?:\s.*)?)$"
)
_PROMPT_END = re.compile(r"(?:^|[$#%>~➜]\s*)$")
_HOST = re.compile(r"[\w.-]+@(?P<host>[\w.-]+)")
_SHELL = re.compile(r"^(?:\([^)]*\)\s+)?(?:[\w.-]+@[\w.-]+\S*\s*)?[$#%>]\s")
_SEPARATOR = re.compile(r"^\s*(?:-{3,}|={3,})[\w .:-]*?(?:-{3,}|={3,})?\s*$")
_NAME_EPOCH = re.compile(r"(?<!\d)(1\d{9})(?:\.\d+)?(?!\d)")
_NAME_STAMP = re.compile(r"(?<!\d)(20\d\d)(\d\d)(\d\d)[-_T]?(\d\d)(\d\d)(\d\d)(?!\d)")

_SNIFF_STRONG = re.compile(
    r"NVIDIA-SMI \d|<nvidia_smi_log|\|\s+\d+MiB\s+/\s+\d+MiB\s+\||--query-(?:gpu|compute-apps)="
)
_SNIFF_HEADERLESS = re.compile(
    r"(?m)^\d+, [^,\n]*[A-Za-z][^,\n]*, \d+(?: MiB)?, \d+(?: MiB)?, \d+(?: MiB)?(?:, \d+(?: %)?)?$"
)


def name_time(name: str) -> datetime | None:
    """A time the file name states: a Unix time or YYYYMMDD-HHMMSS (taken as UTC)."""
    m = _NAME_EPOCH.search(name)
    if m:
        return datetime.fromtimestamp(int(m.group(1)), tz=UTC).replace(tzinfo=None)
    m = _NAME_STAMP.search(name)
    if m:
        try:
            return datetime(*(int(g) for g in m.groups()))  # type: ignore[arg-type]
        except ValueError:
            return None
    return None


class _TextReader:
    """Dispatches each line of a text capture to the reader that understands it."""

    def __init__(self, book: SnapshotBook) -> None:
        self.book = book
        self.table = TableReader(book)
        self.csv = CsvReader(book)

    def feed(self, line_no: int, text: str) -> bool:
        line = text.rstrip()
        if not line.strip():
            return True
        if line[0] in "|+":  # most lines of a table capture: skip the other readers
            return self.table.feed(line_no, line)
        stamp = timestamp_of(line)
        if stamp:
            self.book.announce(stamp[0], stamp[1])
            return True
        if self._meta(line):
            return True
        return self.table.feed(line_no, line) or self.csv.feed(line_no, line)

    def _meta(self, line: str) -> bool:
        """Watch headers, shell prompts, command lines, comments and separators."""
        watch = WATCH.match(line) if line.startswith("Every") else None
        if watch:
            when = ctime(watch["when"])
            self.book.announce(when[0] if when else None, "watch header time", watch["host"])
            return True
        command = _COMMAND.match(line) if "nvidia-smi" in line else None
        if command and _PROMPT_END.search(command["prefix"]):
            host = _HOST.search(command["prefix"])
            if host:
                self.book.announce(None, None, host["host"])
            self.csv.command(command["args"])
            return True
        return bool(_SHELL.match(line) or _SEPARATOR.match(line))

    def notes(self) -> list[str]:
        return self.csv.all_notes() + self.table.notes()


class NvidiaSmiIngester(Ingester):
    """Reads nvidia-smi captures into per-GPU snapshots and per-process rows."""

    kind = "nvidia_smi"
    description = "nvidia-smi output: table, --query-gpu / --query-compute-apps CSV, -q -x XML"
    tables = ("gpu_snapshots", "gpu_processes")
    max_bytes = 512 << 20  # read whole into memory

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        # Below the vLLM log's 90: a server log that quotes an nvidia-smi table stays a log.
        if _SNIFF_STRONG.search(without_exposition_lines(head)):
            return 88
        if any(header_fields(line) for line in head.splitlines()[:50]):
            return 80
        return 50 if _SNIFF_HEADERLESS.search(head) else 0

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        for path, rel in zip(unit.files, unit.rels, strict=True):
            yield from self._ingest_file(path, rel, unit.replica)

    def _ingest_file(self, path: Path, rel: str, replica: str) -> Iterator[Emit]:
        stats = ReadStats()
        lines = [t for batch in iter_line_batches(path, stats) for t in batch["text"]]
        book = SnapshotBook(rel, replica)
        tally = Tally(total=len(lines))
        unmatched: list[tuple[int, str]] = []
        if any("<nvidia_smi_log" in t for t in lines[:200]):
            problems = self._xml(lines, book, tally, unmatched)
        else:
            problems = self._text(lines, book, tally, unmatched)
        yield from problems
        if stats.truncated:
            yield InputProblem(rel, tally.total or None, stats.truncated)
        if stats.encoding != "utf-8":
            tally.notes.append(f"decoded as {stats.encoding}")
        yield from self._emit(book, path.name, tally)
        yield tally.account(rel, templates(unmatched))

    def _text(
        self, lines: list[str], book: SnapshotBook, tally: Tally, unmatched: list[tuple[int, str]]
    ) -> list[InputProblem]:
        reader = _TextReader(book)
        for i, text in enumerate(lines):
            if reader.feed(i + 1, text):
                tally.parsed += 1
            elif "\ufffd" in text:
                tally.undecodable += 1
            else:
                tally.unmatched += 1
                unmatched.append((i + 1, text))
        tally.notes.extend(reader.notes())
        return []

    def _xml(
        self, lines: list[str], book: SnapshotBook, tally: Tally, unmatched: list[tuple[int, str]]
    ) -> list[InputProblem]:
        problems = []
        for start, end in xml_log.documents(lines):
            try:
                root = xml_log.parse("\n".join(lines[start:end]), start + 1)
                xml_log.read_document(root, lines, book)
                tally.parsed += end - start
            except Exception as exc:  # expat errors and malformed values alike
                tally.unmatched += end - start
                unmatched += [(n + 1, lines[n]) for n in range(start, end)]
                where = getattr(exc, "lineno", None)
                problems.append(InputProblem(book.rel, where, f"XML not readable: {exc}"))
        return problems

    def _emit(self, book: SnapshotBook, file_name: str, tally: Tally) -> Iterator[Emit]:
        snaps = book.snapshots
        if len(snaps) == 1 and snaps[0].ts is None and not _row_times(snaps[0].gpus):
            snaps[0].ts = name_time(file_name)
            if snaps[0].ts is not None:
                tally.notes.append("snapshot time from the file name")
        tally.notes.extend(sorted(book.time_notes))
        gpus = [_row(book, s, g, "gpu_snapshots") for s in snaps for g in s.gpus]
        procs = [_row(book, s, p, "gpu_processes") for s in snaps for p in s.procs]
        tally.records = len(gpus) + len(procs)
        if len(snaps) > 1:
            tally.notes.append(f"{len(snaps)} snapshots")
        if gpus:
            yield TableBatch("gpu_snapshots", frame_for("gpu_snapshots", gpus))
        if procs:
            yield TableBatch("gpu_processes", frame_for("gpu_processes", procs))


def _row_times(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("ts") is not None for r in rows)


@cache
def _declared(table_name: str) -> frozenset[str]:
    return frozenset(table(table_name).column_names)


def _row(book: SnapshotBook, snap: Any, values: dict[str, Any], table_name: str) -> dict[str, Any]:
    declared = _declared(table_name)
    row = {k: v for k, v in values.items() if k in declared}
    row.update(
        source_path=book.rel,
        raw=clean_raw(values["raw"]),
        replica=book.replica,
        ts=values.get("ts") or snap.ts,
        snapshot=snap.number,
    )
    if table_name == "gpu_snapshots":
        row.update(
            host=snap.host,
            source_kind=snap.kind,
            driver_version=values.get("driver_version") or snap.driver,
        )
    return row
