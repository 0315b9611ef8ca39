"""Grafana panel data exported as CSV (Inspect > Data > Download CSV).

Accepted shapes:

* wide (Grafana 7+): a header `"Time","<series>",...` then one row per time, one column per
  series; several frames are separated by a blank line, each with its own header;
* long (Grafana 6 "Export CSV"): `Series;Time;Value` rows.

The delimiter is `,`, `;` or a tab (read from the header); a leading `sep=,` line (the
"Download for Excel" option) and CRLF line ends are accepted. Times are unix seconds or
milliseconds or `YYYY-MM-DD HH:MM:SS` / ISO-8601; Grafana writes them in the browser's
zone, which the file does not record, so zone-less times are taken as UTC (a note says so).
A series column must be named like `vllm:kv_cache_usage_perc{engine="0", instance="..."}`,
which is Grafana's display name when the panel has no legend format; a legend (`{{pod}}`,
"A-series") names no metric, and its values are counted, not stored. Values formatted with
units ("91.0%", "1.2 s": the "Formatted data" option) are not numbers and are not read.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import polars as pl

from kvdiag.analyzer.ingest.base import (
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    Tally,
)
from kvdiag.analyzer.ingest.metrics.scrape_time import text_to_utc
from kvdiag.analyzer.ingest.metrics.tables import SampleBuilder, TemplateTally
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.analyzer.text.lines import ReadStats, iter_line_batches
from kvdiag.domain.records.diagnosis import InputProblem

_HEADER = re.compile(r'^\ufeff?"?(Time|time|Series|series)"?([,;\t])')
_EXCEL_SEP = re.compile(r"^\ufeff?sep=(.)\s*$")
_LINES = {"line_no": pl.Int64, "text": pl.String}
_ZONE_NOTE = "times without a zone are taken as UTC (Grafana writes the browser's local time)"


class GrafanaCsvIngester(Ingester):
    """Reads Grafana panel CSV exports (wide or long) of Prometheus series."""

    kind = "grafana_csv"
    description = "Grafana panel CSV export (Inspect > Data > Download CSV)"
    tables = ("metric_samples", "config", "gpu_snapshots")
    max_bytes = 512 << 20  # read whole into memory

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        lines = [line for line in head[:4096].splitlines() if line.strip()][:2]
        if lines and _EXCEL_SEP.match(lines[0]):
            lines = lines[1:]
        return 80 if lines and _HEADER.match(lines[0]) else 0

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        rel = unit.rels[0]
        stats = ReadStats()
        batches = list(iter_line_batches(unit.files[0], stats))
        lines = pl.concat(batches) if batches else pl.DataFrame(schema=_LINES)
        tally, templates = Tally(total=lines.height), TemplateTally()
        if stats.truncated:
            yield InputProblem(rel, lines.height or None, stats.truncated)
        cells = _cells(lines, tally, templates)
        parsed = cells.filter(pl.col("ts").is_not_null())
        numbers = parsed.filter(pl.col("value").is_not_null())
        unread = parsed.filter(pl.col("value").is_null() & (pl.col("cell").str.strip_chars() != ""))
        if unread.height:
            tally.notes.append(
                f"{unread.height} cells are not plain numbers (formatted with units?), "
                f"e.g. {unread['cell'][0]!r}: export without 'Formatted data'"
            )
        builder = SampleBuilder(load_aliases(), unit.replica)
        resolved = builder.build(
            numbers.select(
                pl.lit(rel).alias("source_path"),
                pl.col("line_no").alias("source_line"),
                pl.col("text").alias("raw"),
                "ts",
                pl.col("series").alias("head"),
                "value",
                pl.lit(None, pl.Int64).alias("scrape"),
            )
        )
        tally.records = resolved.samples.height
        for name in resolved.unknown_heads.head(5):
            tally.notes.append(f"column {name!r} names no known metric (a legend?): not stored")
        yield from resolved.batches()
        yield tally.account(rel, templates.top())


def _cells(lines: pl.DataFrame, tally: Tally, templates: TemplateTally) -> pl.DataFrame:
    """Every data cell of every frame: line_no, text, ts, series, cell, value."""
    blank = lines["text"].str.strip_chars() == ""
    block = (blank | (pl.int_range(lines.height, eager=True) == 0)).cum_sum()
    frames = []
    for _, part in (
        lines.with_columns(block.alias("_b")).filter(~blank).group_by("_b", maintain_order=True)
    ):
        frames.append(_frame_cells(part.drop("_b"), tally, templates))
    tally.parsed += int(blank.sum())
    schema: dict[str, pl.DataType] = {
        "line_no": pl.Int64(),
        "text": pl.String(),
        "ts": pl.Datetime("us"),
        "series": pl.String(),
        "cell": pl.String(),
        "value": pl.Float64(),
    }
    frames = [f for f in frames if f.height]
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _frame_cells(part: pl.DataFrame, tally: Tally, templates: TemplateTally) -> pl.DataFrame:
    """The cells of one frame (header line, then data lines)."""
    first = part["text"][0]
    if _EXCEL_SEP.match(first):
        tally.parsed += 1
        part = part.slice(1)
        first = part["text"][0] if part.height else ""
    header = _HEADER.match(first)
    if header is None:
        _unread(part, tally, templates)
        return pl.DataFrame()
    body = "\n".join(part["text"].to_list())
    try:
        table = pl.read_csv(
            io.StringIO(body),
            separator=header.group(2),
            infer_schema=False,
            truncate_ragged_lines=True,
        )
    except pl.exceptions.PolarsError as exc:  # duplicate column names, broken quoting ...
        _unread(part, tally, templates)
        tally.notes.append(f"frame at line {part['line_no'][0]}: not readable as CSV ({exc})")
        return pl.DataFrame()
    if table.height != part.height - 1:  # a quoted cell spanning lines: rows lose their lines
        _unread(part, tally, templates)
        tally.notes.append(f"frame at line {part['line_no'][0]}: cells span lines, not read")
        return pl.DataFrame()
    table = table.with_columns(
        part["line_no"].slice(1).alias("line_no"), part["text"].slice(1).alias("text")
    )
    names = {c.lower(): c for c in table.columns}
    if {"series", "time", "value"} <= set(names):
        long = table.select(
            "line_no",
            "text",
            pl.col(names["time"]).alias("_t"),
            pl.col(names["series"]).alias("series"),
            pl.col(names["value"]).alias("cell"),
        )
    else:
        time_col = table.columns[0]
        long = table.unpivot(
            index=["line_no", "text", time_col], variable_name="series", value_name="cell"
        ).rename({time_col: "_t"})
    zoneless = long["_t"].str.contains(r"^\d{4}-\d\d-\d\d[T ][\d:.]+$").any()
    if zoneless and _ZONE_NOTE not in tally.notes:
        tally.notes.append(_ZONE_NOTE)
    cells = long.with_columns(
        text_to_utc(pl.col("_t")).alias("ts"),
        pl.col("cell").str.strip_chars().cast(pl.Float64, strict=False).alias("value"),
    ).drop("_t")
    bad = cells.filter(pl.col("ts").is_null()).select("line_no", "text").unique(maintain_order=True)
    tally.parsed += part.height - bad.height
    _unread(bad, tally, templates)
    return cells.filter(pl.col("ts").is_not_null()).select(
        "line_no", "text", "ts", "series", "cell", "value"
    )


def _unread(rows: pl.DataFrame, tally: Tally, templates: TemplateTally) -> None:
    """Count lines not read: undecodable when they hold invalid bytes, else unmatched."""
    garbled = rows["text"].str.contains("\ufffd", literal=True)
    tally.undecodable += int(garbled.sum())
    tally.unmatched += rows.height - int(garbled.sum())
    templates.add(rows.filter(~garbled).rename({"line_no": "source_line"}))
