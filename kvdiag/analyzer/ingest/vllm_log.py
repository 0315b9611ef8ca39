"""vLLM server logs: every line parsed into an event table or counted unmatched."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kvdiag.analyzer.ingest.base import (
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    TableBatch,
    Tally,
    template_expr,
)
from kvdiag.analyzer.ingest.formats import FormatPack, load_pack
from kvdiag.analyzer.ingest.lines import ReadStats, iter_line_batches
from kvdiag.analyzer.ingest.logparse import MAX_STORED_LINE, apply_envelope, match_events
from kvdiag.analyzer.ingest.logtime import YearState, add_timestamps, initial_year
from kvdiag.analyzer.model import InputProblem, UnmatchedTemplate
from kvdiag.analyzer.schema import table

_SNIFF = re.compile(
    r"(?m)^(?:\S+ )?(?:\([^)]*pid=\d+[^)]*\) )?"
    r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[?[\w./-]+\.py:\d+\]"
)
_VLLM_WORDS = ("vllm", "vLLM", "KV cache", "Engine 000", "EngineCore", "gpu_executor")
MAX_TEMPLATES = 500


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


def _rank_expr() -> pl.Expr:
    from_proc = pl.coalesce(
        pl.col("proc").str.extract(r"TP(\d+)", 1),
        pl.col("proc").str.extract(r"rank=(\d+)", 1),
    )
    return pl.coalesce(pl.col("rank_prefix"), from_proc).cast(pl.Int32, strict=False).alias("rank")


def _table_frame(rows: pl.DataFrame, table_name: str, unit: InputUnit, rel: str) -> pl.DataFrame:
    """Shape matched rows into a store table: provenance, envelope, then the event fields."""
    declared = table(table_name).column_names
    base = rows.with_columns(
        pl.lit(rel).alias("source_path"),
        pl.col("line_no").alias("source_line"),
        pl.col("clean").str.slice(0, MAX_STORED_LINE).alias("raw"),
        pl.lit(unit.replica).alias("replica"),
        pl.col("proc").alias("process"),
        pl.col("pid").cast(pl.Int64, strict=False),
        _rank_expr(),
    )
    return base.select([c for c in declared if c in base.columns])


class VllmLogIngester(Ingester):
    """Reads vLLM server logs of any version (v0 and v1 engines)."""

    kind = "vllm_log"
    description = "vLLM server log (API server, engine core and worker lines)"
    tables = ("log_kv_pool", "log_stats")
    pack_name = "vllm_log"

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        hits = len(_SNIFF.findall(head))
        if hits and any(w in head for w in _VLLM_WORDS):
            return 90
        return 40 if hits else 0

    @property
    def pack(self) -> FormatPack:
        return load_pack(self.pack_name)

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        for path, rel in zip(unit.files, unit.rels, strict=True):
            yield from self._ingest_file(path, rel, unit, ctx)

    def _ingest_file(
        self, path: Path, rel: str, unit: InputUnit, ctx: IngestContext
    ) -> Iterator[Emit]:
        tally = Tally()
        templates = _Templates()
        stats = ReadStats()
        year: YearState | None = None
        for batch in iter_line_batches(path, stats):
            frame = apply_envelope(batch, self.pack)
            if year is None:
                first = frame["md"].drop_nulls()
                year = initial_year(ctx, path, int(first[0][:2]) if first.len() else None)
            frame = add_timestamps(frame, year)
            frame, matched = match_events(frame, self.pack)
            for rows in matched:
                out = _table_frame(rows.frame, rows.event.table, unit, rel)
                tally.records += out.height
                yield TableBatch(rows.event.table, out)
            self._count(frame, tally, templates)
        if year is not None:
            tally.notes.append(f"year {year.base_year} from {year.source}")
            if year.used_container_year:
                tally.notes.append("container timestamps gave the year where present")
        if stats.truncated:
            yield InputProblem(rel, tally.total or None, stats.truncated)
        yield tally.account(rel, templates.top())

    @staticmethod
    def _count(frame: pl.DataFrame, tally: Tally, templates: _Templates) -> None:
        parsed = (pl.col("_envelope") | pl.col("event").is_not_null()) & ~pl.col("near_miss")
        bad_text = pl.col("text").str.contains("\ufffd", literal=True)
        flags = frame.select(
            parsed.alias("p"), (~parsed & bad_text).alias("u"), (~parsed & ~bad_text).alias("n")
        )
        tally.total += frame.height
        tally.parsed += int(flags["p"].sum())
        tally.undecodable += int(flags["u"].sum())
        tally.unmatched += int(flags["n"].sum())
        templates.add(frame.filter(~parsed & ~bad_text).select("line_no", "clean"))
