"""A scraper's log of every attempt (`metrics/scrapes.jsonl`) into the `scrapes` table.

One JSON object per line, as the recording scraper writes it:
`{"ts": 1795959236.911, "ts_done": 1795959236.913, "file": "1795959236.911.prom" | null,
"http_status": 200 | null, "bytes": 54530, "error": null | "URLError: ... Connection refused"}`.
Accepted keys: the time `ts` | `time` | `timestamp` (unix seconds or milliseconds, or
ISO-8601), `ts_done` | `done`, `file` | `path`, `http_status` | `status_code`,
`bytes` | `size`, `error` | `err`. An attempt is `ok` unless it has an error or a non-2xx
status. Failed attempts matter: a run of `Connection refused` says when the server was not
listening. The first time in the log also dates year-less server logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime

import polars as pl

from kvdiag.analyzer.ingest.base import (
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    TableBatch,
    Tally,
)
from kvdiag.analyzer.ingest.metrics.scrape_time import text_to_utc
from kvdiag.analyzer.ingest.metrics.tables import TemplateTally
from kvdiag.analyzer.ingest.rows import MAX_RAW
from kvdiag.analyzer.text.lines import ReadStats, iter_line_batches
from kvdiag.domain.records.diagnosis import InputProblem

_KEYS = {
    "ts": ("ts", "time", "timestamp"),
    "ts_done": ("ts_done", "done"),
    "file": ("file", "path"),
    "http_status": ("http_status", "status_code"),
    "bytes": ("bytes", "size"),
    "error": ("error", "err"),
}
_OBJECT_LINE = re.compile(r'^\s*\{.*"(?:ts|time|timestamp)"\s*:')


def _field(name: str) -> pl.Expr:
    """The first of the key's accepted spellings present on the line, as text."""
    return pl.coalesce(
        [pl.col("text").str.json_path_match(f"$.{key}") for key in _KEYS[name]]
    ).alias(name)


class ScrapeLogIngester(Ingester):
    """Reads a scraper's JSON-lines log of scrape attempts (ok and failed)."""

    kind = "scrape_log"
    description = "a scraper's log of /metrics attempts (scrapes.jsonl), failures included"
    tables = ("scrapes",)

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        first = next((line for line in head[:4096].splitlines() if line.strip()), "")
        if not _OBJECT_LINE.match(first):
            return 0
        has_error = '"error"' in first or '"err"' in first
        has_target = any(f'"{k}"' in first for k in ("file", "path", "bytes", "http_status"))
        if not (has_error and has_target):
            return 0
        return 90 if "scrape" in name.lower() else 60

    @classmethod
    def content_time_hint(cls, head: str) -> datetime | None:
        lines = [line for line in head.splitlines()[:50] if line.strip()]
        if not lines:
            return None
        frame = pl.DataFrame({"text": lines}).select(text_to_utc(_field("ts")).alias("ts"))
        value = frame["ts"].drop_nulls().min()
        return value if isinstance(value, datetime) else None

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        path, rel = unit.files[0], unit.rels[0]
        folder = rel.rpartition("/")[0]
        stats = ReadStats()
        tally, templates = Tally(), TemplateTally()
        failed = 0
        for batch in iter_line_batches(path, stats):
            rows = _attempts(batch, folder, unit.replica, rel)
            blank = batch.filter(pl.col("text").str.strip_chars() == "")
            bad = batch.join(
                rows.select(pl.col("source_line").alias("line_no")), on="line_no", how="anti"
            )
            bad = bad.join(blank, on="line_no", how="anti")
            tally.total += batch.height
            tally.unmatched += bad.height
            tally.parsed += batch.height - bad.height
            tally.records += rows.height
            failed += rows.filter(pl.col("status") == "error").height
            templates.add(bad.rename({"line_no": "source_line"}))
            if rows.height:
                yield TableBatch("scrapes", rows)
        if stats.truncated:
            yield InputProblem(rel, None, stats.truncated)
        tally.notes.append(f"{tally.records} scrape attempts, {failed} failed")
        yield tally.account(rel, templates.top())


def _attempts(batch: pl.DataFrame, folder: str, replica: str, rel: str) -> pl.DataFrame:
    """One row per line that is a JSON object with a readable time."""
    fields = batch.filter(pl.col("text").str.contains(r"^\s*\{")).with_columns(
        *(_field(name) for name in _KEYS)
    )
    status = pl.col("http_status").cast(pl.Int32, strict=False)
    error = pl.when(pl.col("error").str.strip_chars() != "").then(pl.col("error"))
    failed = error.is_not_null() | (status.is_not_null() & ((status < 200) | (status > 299)))
    sent, done = text_to_utc(pl.col("ts")), text_to_utc(pl.col("ts_done"))
    prefix = f"{folder}/" if folder else ""
    return fields.filter(sent.is_not_null()).select(
        pl.lit(rel).alias("source_path"),
        pl.col("line_no").alias("source_line"),
        pl.col("text").str.slice(0, MAX_RAW).alias("raw"),
        pl.lit(replica).alias("replica"),
        sent.alias("ts"),
        pl.lit(None, pl.Int64).alias("samples"),
        pl.when(failed).then(pl.lit("error")).otherwise(pl.lit("ok")).alias("status"),
        pl.coalesce(error, pl.when(failed).then(pl.format("HTTP {}", status))).alias("error"),
        pl.lit("log").alias("origin"),
        (pl.lit(prefix) + pl.col("file")).alias("file"),
        status.alias("http_status"),
        pl.col("bytes").cast(pl.Int64, strict=False).alias("bytes"),
        ((done - sent).dt.total_microseconds() / 1e6).alias("duration_s"),
    )
