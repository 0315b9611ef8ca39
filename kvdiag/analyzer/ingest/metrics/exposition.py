"""Prometheus text exposition (0.0.4) and OpenMetrics: snapshots and series of scrapes.

Metric inputs kvdiag accepts (each kind is recognised by content, not by name):

* Exposition text (this module): one `/metrics` snapshot as served (`curl -s
  host:8000/metrics > metrics.prom`); a folder of scrapes named by time
  (`metrics/<unix_ts>.prom`, also `<word>-<unix_ts>.prom`, milliseconds or an ISO stamp),
  read as one series; one file holding several scrapes separated by marker lines
  (`# scrape at <time>`, `# ts=<time>`, `# <time>` or a line that is only a time: see
  scrape_time.py) or by OpenMetrics `# EOF`; samples with their own timestamps
  (milliseconds as in 0.0.4, or OpenMetrics seconds). Label escapes, NaN and +-Inf,
  `_created` series and exemplars are handled; gzip is read transparently.
  dcgm-exporter scrapes (`DCGM_FI_DEV_FB_*`, MiB) also become gpu_snapshots rows.
* A scraper's log of attempts, one JSON object per line (`metrics/scrapes.jsonl`:
  scrape_log.py), failures included.
* Prometheus HTTP API results saved as JSON, `/api/v1/query` (vector) and
  `/api/v1/query_range` (matrix) (api_export.py).
* Grafana panel CSV exports, wide or long (grafana_csv.py).

Every line is accounted for: comments (HELP, TYPE, UNIT, EOF, markers), blank lines and
valid sample lines are parsed, anything else is unmatched. Only samples of metrics in the
alias table (metric_aliases.toml) are stored, under canonical names, with path and
line; the labels of vllm:cache_config_info become config rows; every scrape read becomes a
`scrapes` row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import NamedTuple

import polars as pl

from kvdiag.analyzer.ingest.base import (
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    TableBatch,
    Tally,
)
from kvdiag.analyzer.ingest.metrics.exposition_parse import ParsedLines, parse_lines
from kvdiag.analyzer.ingest.metrics.scrape_files import FileGroup, LineBatch, batches, read_batch
from kvdiag.analyzer.ingest.metrics.scrape_time import (
    SCRAPE_NAME,
    epoch_text_time,
    first_time_in,
    scrape_time_from_name,
)
from kvdiag.analyzer.ingest.metrics.tables import SampleBuilder, TemplateTally
from kvdiag.analyzer.ingest.parallel import ordered_map
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.analyzer.schema.sample_tail import TAIL
from kvdiag.domain.records.diagnosis import InputProblem

_KNOWN_SAMPLE = re.compile(
    r"(?m)^(?:ray_)?(?:vllm|sglang|DCGM_FI_\w+)[:\w]*(?:\{[^}]*\})?[ \t]+[-+\w.]+[ \t]*$"
)
_SAMPLE_TS = re.compile(
    r"(?m)^[a-zA-Z_:][\w:]*(?:\{.*\})?[ \t]+\S+[ \t]+(-?\d{10,13}(?:\.\d+)?)\s*$"
)


class PromTextIngester(Ingester):
    """Reads Prometheus text exposition: `/metrics` snapshots and scrape series."""

    kind = "prom_text"
    description = "Prometheus /metrics text (a snapshot, a folder of <unix_ts>.prom scrapes, ...)"
    tables = ("metric_samples", "config", "scrapes", "gpu_snapshots")

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        if "# TYPE " in head or "# HELP " in head:
            return 85
        if _KNOWN_SAMPLE.search(head):
            return 70
        return 0

    @classmethod
    def series_key(cls, rel: str) -> str | None:
        folder, _, name = rel.rpartition("/")
        return (folder or ".") if SCRAPE_NAME.match(name) else None

    @classmethod
    def time_hint(cls, rel: str) -> datetime | None:
        return scrape_time_from_name(rel.rpartition("/")[2])

    @classmethod
    def content_time_hint(cls, head: str) -> datetime | None:
        marked = first_time_in(head)
        if marked is not None:
            return marked
        m = _SAMPLE_TS.search(head)
        return None if m is None else epoch_text_time(m.group(1))

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        aliases = load_aliases()
        builder = SampleBuilder(aliases, unit.replica)
        tally, templates = Tally(), TemplateTally()
        untimed = valid = read = 0

        def prepare(group: FileGroup) -> _Prepared:
            # On a worker thread: reading and parsing are independent per batch, while the
            # main thread stores the batch before (polars and DuckDB release the GIL).
            files = group.indices
            batch = read_batch([unit.files[i] for i in files], [unit.rels[i] for i in files])
            parsed = parse_lines(batch.lines, aliases)
            starts = _scrape_starts(batch, parsed.boundaries)
            timed = _timed_samples(batch, parsed.samples, starts)
            # The samples live on in `timed`; two copies of a batch's rows wait otherwise.
            return _Prepared(
                group, batch, replace(parsed, samples=parsed.samples.clear()), starts, timed
            )

        for prepared in ordered_map(prepare, batches(unit.files), threads=1, ahead=1):
            batch, parsed = prepared.batch, prepared.parsed
            for problem in batch.problems:
                yield InputProblem(unit.rel, None, problem)
            _count_lines(tally, templates, batch, parsed)
            # Remembers config: in order.
            resolved = builder.shape(prepared.timed, parsed.heads, parsed.pairs)
            scrapes = _scrape_rows(batch, prepared.starts, parsed.sample_rows, unit)
            tally.records += resolved.samples.height
            untimed += resolved.samples["ts"].null_count()
            valid += parsed.sample_rows.len()
            group = prepared.group
            # While this batch is stored only what is stored stays alive: the lines, the
            # parsed and the timed frames (2 to 3 times the stored rows' size) go first, and
            # all of it before the next batch is waited for, or three batches are alive (this
            # one, the next one parsed, the one after being parsed).
            del prepared, batch, parsed
            yield from resolved.batches()
            yield from _emit("scrapes", scrapes)
            del resolved, scrapes
            if ctx.progress is not None:
                read += group.size
                ctx.progress(read, tally.total)
        tally.notes.append(
            f"{tally.records} samples of known metrics stored; "
            f"{valid - tally.records} other sample lines parsed, not kept"
        )
        if untimed:
            tally.notes.append(
                f"{untimed} samples have no time (none in the file name, a marker line or "
                "the sample): they are ordered by file and line only"
            )
        yield tally.account(unit.rel, templates.top())


class _Prepared(NamedTuple):
    """One batch of files read, parsed and timed."""

    group: FileGroup
    batch: LineBatch
    parsed: ParsedLines
    starts: pl.DataFrame
    timed: pl.DataFrame


def _count_lines(
    tally: Tally, templates: TemplateTally, batch: LineBatch, parsed: ParsedLines
) -> None:
    tally.total += batch.lines.height
    tally.parsed += parsed.parsed
    tally.unmatched += parsed.unmatched.height
    tally.undecodable += parsed.undecodable
    templates.add(batch.locate(parsed.unmatched))


def _emit(name: str, frame: pl.DataFrame) -> Iterator[TableBatch]:
    if frame.height:
        yield TableBatch(name, frame)


def _scrape_starts(batch: LineBatch, boundaries: pl.DataFrame) -> pl.DataFrame:
    """Where each scrape of the batch starts (row), its time, and the marker text if any.

    Every file starts a scrape (timed by its name); a marker line starts one (its time wins
    over the name's when both fall on the same line), and so does the line after `# EOF`.
    """
    files = pl.DataFrame(
        {"row": batch.starts, "ts": batch.name_times, "text": None, "prio": 1},
        schema={"row": pl.Int64, "ts": pl.Datetime("us"), "text": pl.String, "prio": pl.Int32},
    )
    inner = boundaries.with_columns(
        pl.when(pl.col("text").is_null()).then(2).otherwise(0).cast(pl.Int32).alias("prio")
    )
    return (
        pl.concat([files, inner.cast({"ts": pl.Datetime("us")})])
        .filter(pl.col("row") < batch.lines.height)
        .sort("row", "prio")
        .unique(subset="row", keep="first", maintain_order=True)
        .with_row_index("scrape")
        .cast({"scrape": pl.Int64})
    )


def _scrape_of(starts: pl.DataFrame, rows: pl.Series) -> pl.Series:
    return (starts["row"].search_sorted(rows, side="right") - 1).cast(pl.Int64)


def _timed_samples(batch: LineBatch, samples: pl.DataFrame, starts: pl.DataFrame) -> pl.DataFrame:
    """Samples with provenance and time: their own timestamp, else their scrape's."""
    scrape = _scrape_of(starts, samples["row"])
    located = batch.locate(samples.with_columns(scrape.alias("scrape")))
    return located.select(
        "head_id",
        "scrape",
        "source_path",
        "source_line",
        "raw",
        TAIL,
        pl.coalesce(pl.col("sample_ts"), starts["ts"].gather(scrape)).alias("ts"),
        "value",
    )


def _scrape_rows(
    batch: LineBatch, starts: pl.DataFrame, sample_rows: pl.Series, unit: InputUnit
) -> pl.DataFrame:
    """One `scrapes` row per scrape read: where it starts, when, and its sample lines."""
    counts = (
        pl.DataFrame({"scrape": _scrape_of(starts, sample_rows)})
        .group_by("scrape")
        .agg(pl.len().cast(pl.Int64).alias("samples"))
    )
    rows = batch.locate(starts.join(counts, on="scrape", how="left"))
    # A scrape is a file, a marker, or a stretch after # EOF that holds samples; a file
    # without samples (HELP lines only) is still one scrape.
    alone = pl.len().over("f") == 1
    rows = rows.filter((pl.col("samples") > 0) | (pl.col("prio") == 0) | alone)
    return rows.select(
        "source_path",
        "source_line",
        pl.col("text").alias("raw"),
        pl.lit(unit.replica).alias("replica"),
        "ts",
        pl.col("samples").fill_null(0),
        pl.lit("ok").alias("status"),
        pl.lit("body").alias("origin"),
        pl.col("source_path").alias("file"),
    )
