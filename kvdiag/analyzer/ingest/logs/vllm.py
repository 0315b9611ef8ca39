"""vLLM server logs: every line parsed into an event table or counted unmatched.

A file is read batch by batch; each batch goes through `parse_batch` (repairs, envelope,
events, records), then its event rows are shaped into store tables and its lines counted.
Rotated sets (`vllm.log`, `vllm.log.1`, `vllm.log.2.gz`) are one unit, read oldest first
so the year carries across files; each file keeps its own account.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kvdiag.analyzer.ingest.base import (
    Account,
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    TableBatch,
    Tally,
    template_expr,
)
from kvdiag.analyzer.ingest.logs.access import AccessBook
from kvdiag.analyzer.ingest.logs.access import count_rows as count_access
from kvdiag.analyzer.ingest.logs.batch import BatchResult, LineCounts
from kvdiag.analyzer.ingest.logs.batch import read_batch as read_log_batch
from kvdiag.analyzer.ingest.logs.config_rows import FirstStatements, config_rows, decode_dicts
from kvdiag.analyzer.ingest.logs.format_pack import FormatPack, load_pack
from kvdiag.analyzer.ingest.logs.parse import MAX_STORED_LINE, EventRows
from kvdiag.analyzer.ingest.logs.steps import pack_events, stamp_events
from kvdiag.analyzer.ingest.logs.timestamps import YearState, initial_year
from kvdiag.analyzer.ingest.logs.triage import BY_REFERENCE, REJECTED, Lanes, vllm_lanes
from kvdiag.analyzer.ingest.parallel import ordered_map
from kvdiag.analyzer.schema import table
from kvdiag.analyzer.text import lines as line_reader
from kvdiag.analyzer.text.lines import (
    Chunk,
    ReadStats,
    chronological,
    iter_chunks,
    rotation_base,
)
from kvdiag.analyzer.text.repair import Repairs
from kvdiag.domain.records.diagnosis import InputProblem, UnmatchedTemplate

# The header at a line's start: after quoting or indentation, a compose or kubectl prefix,
# a stamp or a prefix word.
_SNIFF = re.compile(
    r"(?m)^[ \t>]*(?:[A-Za-z0-9][\w.-]*\s+\| |\[pod/[^\]\s]+\] )?"
    r"(?:\S+ |\[[^\]]*\] )?(?:\([^)]*pid=\d+[^)]*\) )?"
    r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[?[\w./-]+\.py:\d+\]"
)
_VLLM_WORDS = ("vllm", "vLLM", "KV cache", "Engine 000", "EngineCore", "gpu_executor")
MAX_TEMPLATES = 500
_QUOTED = 60  # a pasted fragment: vLLM messages without the logger header
_LOG_EVENTS = 3  # event lines in the head that make a file a log whatever its other lines
# A batch may end only where a new record starts, so that multi-line messages, wrapped
# lines and interleaved prefixes are never cut apart; the cut is sought in its last lines.
_HEADER_AT_START = re.compile(
    r"^(?:\S+ |\[[^\]]*\] )?(?:\S*\([^)]*pid=\d+[^)]*\) )*"
    r"\S{0,40}?(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) "
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\]"
)
_CUT_SEARCH = 64
_STACKED = re.compile(r"^(?:\S*\([^)]*pid=\d+[^)]*\) ?){2}")


@dataclass
class _Templates:
    """Unmatched-line shapes accumulated across batches (bounded)."""

    rows: dict[str, list[int | str]] = field(default_factory=dict)  # template -> [count, line, ex]

    def add(self, unmatched: pl.DataFrame) -> None:
        if unmatched.is_empty():
            return
        grouped = (
            unmatched.with_columns(template_expr("clean").alias("template"))
            .group_by("template")
            .agg(
                pl.len().alias("n"), pl.col("line_no").min().alias("first"), pl.col("clean").first()
            )
        )
        for tpl, n, first, example in grouped.iter_rows():
            row = self.rows.get(tpl)
            if row is not None:
                row[0] = int(row[0]) + n
            elif len(self.rows) < MAX_TEMPLATES:
                self.rows[tpl] = [n, first, example[:300]]
            else:
                other = self.rows.setdefault("<other shapes>", [0, first, example[:300]])
                other[0] = int(other[0]) + n

    def top(self, k: int = 20) -> tuple[UnmatchedTemplate, ...]:
        ranked = sorted(self.rows.items(), key=lambda kv: (-int(kv[1][0]), int(kv[1][1])))
        return tuple(
            UnmatchedTemplate(t, int(c), int(line), str(ex)) for t, (c, line, ex) in ranked[:k]
        )


def _rank(pattern: str) -> pl.Expr:
    return pl.col("proc").str.extract(pattern, 1).cast(pl.Int32, strict=False)


def _identity() -> list[pl.Expr]:
    """Parallel ranks from process names: Worker_DP1_PP0_TP3_EP3, VllmWorker rank=2 ..."""
    tp = pl.coalesce(
        pl.col("rank_prefix").cast(pl.Int32, strict=False),
        _rank(r"(?:^|[_ ])TP(\d+)"),
        _rank(r"rank=(\d+)"),
        _rank(r"^VllmWorker-(\d+)$"),
    )
    return [
        tp.alias("rank"),
        pl.coalesce(_rank(r"[_ ]DP(\d+)"), _rank(r"^EngineCore_(\d+)$")).alias("dp_rank"),
        _rank(r"(?:^|[_ ])PP(\d+)").alias("pp_rank"),
        _rank(r"[_ ]EP(\d+)").alias("ep_rank"),
    ]


def _provenance(rows: pl.DataFrame, unit: InputUnit, rel: str) -> pl.DataFrame:
    """Provenance and identity columns every row of a log table carries."""
    raw = pl.coalesce("raw_lines", "clean")  # a record spanning lines keeps all of them
    return rows.with_columns(
        pl.lit(rel).alias("source_path"),
        pl.col("line_no").alias("source_line"),
        raw.str.slice(0, MAX_STORED_LINE).alias("raw"),
        raw.str.len_chars().alias("_raw_chars"),
        pl.coalesce(pl.col("pod"), pl.lit(unit.replica)).alias("replica"),
        pl.col("proc").alias("process"),
        pl.col("pid").cast(pl.Int64, strict=False),
        pl.when(pl.col("line_end") != pl.col("line_no")).then("line_end").alias("source_line_end"),
        *_identity(),
    )


def _table_frame(rows: pl.DataFrame, table_name: str) -> pl.DataFrame:
    """The columns of a store table, from rows that carry provenance and event fields."""
    declared = table(table_name).column_names
    if "message" in declared and "message" not in rows.columns:
        rows = rows.with_columns(pl.col("msg").str.slice(0, MAX_STORED_LINE).alias("message"))
    return rows.select([c for c in declared if c in rows.columns])


def _headed_vllm(head: str) -> bool:
    """vLLM's logger header, and one of vLLM's own words: a vLLM log whatever else it says."""
    return _SNIFF.search(head) is not None and any(w in head for w in _VLLM_WORDS)


class VllmLogIngester(Ingester):
    """Reads vLLM server logs of any version (v0 and v1 engines)."""

    kind = "vllm_log"
    description = "vLLM server log (API server, engine core and worker lines)"
    tables = (
        "log_engine",
        "log_kv_pool",
        "log_memory",
        "log_stats",
        "log_preemptions",
        "log_capacity_errors",
        "log_oom",
        "log_http",
        "log_http_counts",
        "log_requests",
        "log_kv_connector",
        "config",
        "line_blocks",
    )
    pack_name = "vllm_log"
    sniff_parses = True

    @classmethod
    def quotes(cls, name: str, head: str) -> bool:
        return cls.sniff(name, head) == _QUOTED

    @classmethod
    def sniff_bound(cls, name: str, head: str) -> int:
        return 90 if _headed_vllm(head) else 80

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        if _headed_vllm(head):
            return 90
        events = pack_events(cls.pack_name, head)
        if events >= _LOG_EVENTS:
            return 80  # the messages repeat behind another logging format: a log
        if events:
            return _QUOTED
        return 40 if _SNIFF.search(head) else 0

    @classmethod
    def series_key(cls, rel: str) -> str | None:
        """Rotated files (`vllm.log.1`, `vllm.log.2.gz`) join their base file's unit."""
        return rotation_base(rel)

    @property
    def pack(self) -> FormatPack:
        return load_pack(self.pack_name)

    @property
    def lanes(self) -> Lanes | None:
        """Fast lanes for the pack (triage.py), or None to parse every line fully.

        The lanes are proven against the vLLM pack only: a subclass reading another pack
        (SGLang) parses every line fully until lanes are built and tested for its pack.
        """
        return vllm_lanes() if self.pack_name == "vllm_log" else None

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        year: YearState | None = None
        done = _Done()
        for path, rel in chronological(unit.files, unit.rels):
            year = yield from self._ingest_file(path, rel, unit, ctx, year, done)

    def _ingest_file(
        self,
        path: Path,
        rel: str,
        unit: InputUnit,
        ctx: IngestContext,
        year: YearState | None,
        done: _Done,
    ) -> Generator[Emit, None, YearState | None]:
        state = _FileState()
        pack, lanes = self.pack, self.lanes
        chunks = iter_chunks(path, state.read, line_reader.BATCH_BYTES, _record_cut)

        def read(chunk: Chunk) -> BatchResult:
            return read_log_batch(chunk, pack, lanes)

        for result in ordered_map(read, chunks):
            if year is None:
                assert result.head is not None
                year = initial_year(ctx, path, result.head)
            by_reference = ctx.text_by_reference and result.block is not None
            for rows in stamp_events(result.events, year, result.container_lines):
                yield from state.emit(rows, unit, rel, by_reference)
            if (config := state.config.batch()) is not None:
                yield TableBatch("config", config)
            state.add(result)
            if ctx.progress is not None:
                ctx.progress(done.bytes + state.read.bytes, done.lines + state.tally.total)
        done.bytes += state.read.bytes
        done.lines += state.tally.total
        yield from state.emit_access(unit, rel)
        if ctx.text_by_reference and (blocks := state.line_blocks(rel, path)) is not None:
            yield TableBatch("line_blocks", blocks)
        for line, message in state.read.problems():
            yield InputProblem(rel, line, message)
        yield state.account(rel, year)
        return year


@dataclass
class _Done:
    """Bytes and lines of the files of a unit already read (a rotated set), for progress."""

    bytes: int = 0
    lines: int = 0


@dataclass
class _FileState:
    """What reading one file accumulates across its batches."""

    tally: Tally = field(default_factory=Tally)
    templates: _Templates = field(default_factory=_Templates)
    read: ReadStats = field(default_factory=ReadStats)
    repairs: Repairs = field(default_factory=Repairs)
    events: dict[str, int] = field(default_factory=dict)
    cut: int = 0  # stored rows whose raw text was cut to MAX_STORED_LINE
    access: AccessBook = field(default_factory=AccessBook)  # access lines counted per key
    config: FirstStatements = field(default_factory=FirstStatements)  # a batch's, when new
    blocks: list[tuple[int, int, int, int]] = field(default_factory=list)  # BatchResult.block

    def emit(
        self, rows: EventRows, unit: InputUnit, rel: str, by_reference: bool = False
    ) -> Iterator[TableBatch]:
        frame = _provenance(decode_dicts(rows.frame, rows.event), unit, rel)
        if by_reference and BY_REFERENCE in frame.columns:
            # the line is read again from the file when cited (store/by_reference.py)
            kept = pl.col(BY_REFERENCE).fill_null(False).not_()
            frame = frame.with_columns(pl.when(kept).then(pl.col("raw")).alias("raw"))
        self.tally.records += frame.height
        self.events[rows.event.id] = self.events.get(rows.event.id, 0) + frame.height
        if rows.event.table == "log_http":  # below 400 counted, rejections kept as rows
            counted = pl.col("status") < REJECTED
            self.access.add(count_access(frame.filter(counted)))
            frame = frame.filter(~counted.fill_null(False))
        out = _table_frame(frame, rows.event.table)
        self.cut += int(frame.select((pl.col("_raw_chars") > MAX_STORED_LINE).sum()).item())
        if out.height:
            yield TableBatch(rows.event.table, out)
        stating = self.config.new_rows(frame, rows.event)
        config = config_rows(stating, rows.event) if stating is not None else None
        if config is not None:
            self.config.add(config)

    def add(self, result: BatchResult) -> None:
        """Count a batch's lines and keep its counted access lines."""
        if result.block is not None:
            self.blocks.append(result.block)
        self.add_counts(result.counts)
        self.repairs.merge(result.repairs)
        if result.access.height:
            n = int(result.access["count"].sum())
            self.tally.records += n
            self.events["http_access"] = self.events.get("http_access", 0) + n
            self.access.add(result.access)

    def add_counts(self, counts: LineCounts) -> None:
        """Count a batch's lines: parsed, undecodable, unmatched (with their templates)."""
        self.tally.total += counts.total
        self.tally.parsed += counts.parsed
        self.tally.undecodable += counts.undecodable
        self.tally.unmatched += counts.unmatched
        self.templates.add(counts.unmatched_rows)

    def emit_access(self, unit: InputUnit, rel: str) -> Iterator[TableBatch]:
        """One log_http_counts row per (process, method, path, status) seen in the file."""
        rows = self.access.table(rel, unit.replica)
        if rows is not None:
            yield TableBatch("log_http_counts", rows)

    def line_blocks(self, rel: str, path: Path) -> pl.DataFrame | None:
        """Where the file's batches lie in it (table line_blocks), if it was read in place."""
        if not self.blocks:
            return None
        first, lines, offset, length = zip(*self.blocks, strict=True)
        return pl.DataFrame(
            {
                "source_path": rel,
                "file_path": str(path.resolve()),
                "first_line": first,
                "lines": lines,
                "byte_offset": offset,
                "byte_length": length,
            }
        )

    def account(self, rel: str, year: YearState | None) -> Account:
        notes = self.tally.notes
        if year is not None:
            notes.append(year.note())
            if year.container_lines:
                notes.append(
                    f"{year.container_lines} lines timed by their container timestamp (UTC)"
                )
        notes += self.read.notes() + self.repairs.notes()
        if self.cut:
            notes.append(f"raw text of {self.cut} records cut to {MAX_STORED_LINE} characters")
        if self.events:
            notes.append("events: " + ", ".join(f"{k} {v}" for k, v in sorted(self.events.items())))
        return self.tally.account(rel, self.templates.top())


def _cut_point(texts: list[str]) -> int:
    """Index of the last line that starts a record of its own (0: none found).

    Not after a line ending in a backslash (a shell line continues) nor after a line with
    two stacked process prefixes (the next line's message belongs to the outer writer).
    """
    for i in range(len(texts) - 1, 0, -1):
        head = _HEADER_AT_START.match(texts[i])
        if head is None or texts[i - 1].endswith("\\") or _STACKED.match(texts[i - 1]):
            continue
        before = _HEADER_AT_START.match(texts[i - 1])
        if before is None or before.group(0) != head.group(0):
            return i
    return 0


def _record_cut(data: bytes, end: int) -> int:
    """Where a batch of data[:end] should end: before the last line that starts a record.

    0: no record starts in the last lines, cut at `end`; -1: too few lines to judge,
    read on.
    """
    starts = [end]
    while len(starts) <= _CUT_SEARCH and starts[-1] > 0:
        starts.append(data.rfind(b"\n", 0, starts[-1] - 1) + 1)
    starts.reverse()
    texts = [
        data[a:b].decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
        for a, b in itertools.pairwise(starts)
    ]
    cut = _cut_point(texts)
    if cut:
        return starts[cut]
    return -1 if len(texts) < _CUT_SEARCH else 0
