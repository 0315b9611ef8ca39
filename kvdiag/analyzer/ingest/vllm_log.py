"""vLLM server logs: every line parsed into an event table or counted unmatched.

A file is read batch by batch; each batch goes through `parse_batch` (repairs, envelope,
events, records), then its event rows are shaped into store tables and its lines counted.
Rotated sets (`vllm.log`, `vllm.log.1`, `vllm.log.2.gz`) are one unit, read oldest first
so the year carries across files; each file keeps its own account.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kvdiag.analyzer.ingest import lines as line_reader
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
from kvdiag.analyzer.ingest.formats import FormatPack, load_pack
from kvdiag.analyzer.ingest.lines import ReadStats, chronological, iter_line_batches, rotation_base
from kvdiag.analyzer.ingest.logconfig import config_rows, decode_dicts
from kvdiag.analyzer.ingest.logparse import (
    MAX_STORED_LINE,
    EventRows,
    apply_envelope,
    parsed_expr,
)
from kvdiag.analyzer.ingest.logpipeline import Parsed, lines_frame, parse_batch
from kvdiag.analyzer.ingest.logtime import YearState, initial_year
from kvdiag.analyzer.ingest.repair import Repairs
from kvdiag.analyzer.model import InputProblem, UnmatchedTemplate
from kvdiag.analyzer.schema import table

_SNIFF = re.compile(
    r"(?m)^(?:\S+ |\[[^\]]*\] )?(?:\([^)]*pid=\d+[^)]*\) )?"
    r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[?[\w./-]+\.py:\d+\]"
)
_VLLM_WORDS = ("vllm", "vLLM", "KV cache", "Engine 000", "EngineCore", "gpu_executor")
MAX_TEMPLATES = 500
_SNIFF_LINES = 400
# A batch may end only where a new record starts, so that multi-line messages, wrapped
# lines and interleaved prefixes are never cut apart; the cut is sought in its last lines.
_HEADER_AT_START = re.compile(
    r"^(?:\S+ |\[[^\]]*\] )?(?:\S*\([^)]*pid=\d+[^)]*\) )*"
    r"\S{0,40}?(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) "
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\]"
)
_CUT_SEARCH = 64


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
        "log_requests",
        "config",
    )
    pack_name = "vllm_log"

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        hits = len(_SNIFF.findall(head))
        if hits and any(w in head for w in _VLLM_WORDS):
            return 90
        if _sniff_events(load_pack(cls.pack_name), head):
            return 60  # a pasted fragment: vLLM messages without the logger header
        return 40 if hits else 0

    @classmethod
    def series_key(cls, rel: str) -> str | None:
        """Rotated files (`vllm.log.1`, `vllm.log.2.gz`) join their base file's unit."""
        return rotation_base(rel)

    @property
    def pack(self) -> FormatPack:
        return load_pack(self.pack_name)

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        year: YearState | None = None
        for path, rel in chronological(unit.files, unit.rels):
            year = yield from self._ingest_file(path, rel, unit, ctx, year)

    def _ingest_file(
        self, path: Path, rel: str, unit: InputUnit, ctx: IngestContext, year: YearState | None
    ) -> Generator[Emit, None, YearState | None]:
        state = _FileState()
        for batch in _record_aligned(iter_line_batches(path, state.read, line_reader.BATCH_BYTES)):
            if year is None:
                year = initial_year(ctx, path, apply_envelope(batch.head(1000), self.pack))
            parsed = parse_batch(batch, self.pack, year, state.repairs)
            for rows in parsed.events:
                yield from state.emit(rows, unit, rel)
            state.count(batch.height, parsed)
        if state.read.truncated:
            yield InputProblem(rel, state.tally.total or None, state.read.truncated)
        yield state.account(rel, year)
        return year


@dataclass
class _FileState:
    """What reading one file accumulates across its batches."""

    tally: Tally = field(default_factory=Tally)
    templates: _Templates = field(default_factory=_Templates)
    read: ReadStats = field(default_factory=ReadStats)
    repairs: Repairs = field(default_factory=Repairs)
    events: dict[str, int] = field(default_factory=dict)
    cut: int = 0  # stored rows whose raw text was cut to MAX_STORED_LINE

    def emit(self, rows: EventRows, unit: InputUnit, rel: str) -> Iterator[TableBatch]:
        frame = _provenance(decode_dicts(rows.frame, rows.event), unit, rel)
        out = _table_frame(frame, rows.event.table)
        self.tally.records += out.height
        self.events[rows.event.id] = self.events.get(rows.event.id, 0) + out.height
        self.cut += int(frame.select((pl.col("_raw_chars") > MAX_STORED_LINE).sum()).item())
        yield TableBatch(rows.event.table, out)
        config = config_rows(frame, rows.event)
        if config is not None:
            yield TableBatch("config", config)

    def count(self, lines: int, parsed: Parsed) -> None:
        """Per physical line: parsed only when every piece of it is (glued lines split)."""
        bad_text = pl.col("text").str.contains("\ufffd", literal=True)
        pieces = parsed.frame.select(
            "line_no", "part", "clean", parsed_expr().alias("p"), bad_text.alias("bad")
        )
        if pieces.height != lines:  # only the few split lines need grouping
            split = pieces.filter(pl.col("part") > 0)["line_no"].unique().implode()
            whole = pieces.filter(pl.col("line_no").is_in(split))
            grouped = whole.group_by("line_no", maintain_order=True).agg(
                pl.col("part").first(),
                pl.col("clean").str.join(""),
                pl.col("p").all(),
                pl.col("bad").any(),
            )
            pieces = pl.concat([pieces.filter(~pl.col("line_no").is_in(split)), grouped])
        flags = pieces.select(
            pl.col("p").sum().alias("p"),
            (~pl.col("p") & pl.col("bad")).sum().alias("u"),
            (~pl.col("p") & ~pl.col("bad")).sum().alias("n"),
        ).row(0)
        self.tally.total += lines
        self.tally.parsed += int(flags[0])
        self.tally.undecodable += int(flags[1])
        self.tally.unmatched += int(flags[2])
        unmatched = pieces.filter(~pl.col("p") & ~pl.col("bad")).select("line_no", "clean")
        self.templates.add(unmatched)

    def account(self, rel: str, year: YearState | None) -> Account:
        notes = self.tally.notes
        if year is not None:
            notes.append(year.note())
            if year.container_lines:
                notes.append(
                    f"{year.container_lines} lines timed by their container timestamp (UTC)"
                )
        notes += self.repairs.notes()
        if self.cut:
            notes.append(f"raw text of {self.cut} records cut to {MAX_STORED_LINE} characters")
        if self.events:
            notes.append("events: " + ", ".join(f"{k} {v}" for k, v in sorted(self.events.items())))
        return self.tally.account(rel, self.templates.top())


def _cut_point(texts: list[str]) -> int:
    """Index of the last line that starts a record of its own (0: none found)."""
    for i in range(len(texts) - 1, 0, -1):
        head = _HEADER_AT_START.match(texts[i])
        if head is None or texts[i - 1].endswith("\\"):
            continue
        before = _HEADER_AT_START.match(texts[i - 1])
        if before is None or before.group(0) != head.group(0):
            return i
    return 0


def _record_aligned(batches: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """Batches that end where a record starts; the rest moves on to the next batch."""
    carry: pl.DataFrame | None = None
    for batch in batches:
        if carry is not None:
            batch = pl.concat([carry, batch])
        tail = batch.tail(_CUT_SEARCH)
        cut = _cut_point(tail["text"].to_list())
        if cut == 0 and batch.height < _CUT_SEARCH:  # too short to judge: read on
            carry = batch
            continue
        if cut == 0:  # no record starts in the last lines: cut at the end, as read
            carry = None
            yield batch
            continue
        keep = batch.height - tail.height + cut
        carry = batch.slice(keep)
        yield batch.head(keep)
    if carry is not None:
        yield carry


def _sniff_events(pack: FormatPack, head: str) -> bool:
    """Whether the head holds a vLLM-specific event (header or not)."""
    literals = {e.literal for e in pack.events if e.sniff}
    if not any(lit in head for lit in literals):
        return False  # the common case (scrapes, tables) costs a few substring tests
    lines = head.split("\n")[:_SNIFF_LINES]
    parsed = parse_batch(lines_frame(lines), pack)
    return any(rows.event.sniff for rows in parsed.events)
