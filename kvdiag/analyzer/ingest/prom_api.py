"""Prometheus HTTP API results saved to a file: /api/v1/query and /api/v1/query_range.

Accepted: the API's response object (`{"status": "success", "data": {"resultType":
"vector" | "matrix", "result": [...]}}`), its `data` object alone, or a JSON list of either
(several queries saved together). Vector results carry `"value": [ts, "v"]`, matrix results
`"values": [[ts, "v"], ...]`. A series without `__name__` (the result of an expression such
as `rate(...)`) names no metric and is counted, not stored; so are scalar and string
results and native histograms.

Each sample cites the line where its `[ts, "value"]` pair starts (pretty-printed JSON, e.g.
`curl ... | jq .`); when the whole document is one line the line is NULL and a note says so.

A saved response may say where it came from beside `status` and `data` (kvdiag's live
source writes them, see kvdiag/analyzer/live/): `"query"`, the PromQL expression, is cited
in each sample's raw text (`[ts, "v"] from <query>`), and `"series_name"` names the series
that carry no `__name__` (aggregations such as `max by (instance) (...)` drop it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from kvdiag.analyzer.ingest.aliases import load_aliases
from kvdiag.analyzer.ingest.base import (
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    TableBatch,
    Tally,
)
from kvdiag.analyzer.ingest.lines import open_binary
from kvdiag.analyzer.ingest.metric_tables import SampleBuilder
from kvdiag.analyzer.ingest.prom_parse import render_head
from kvdiag.analyzer.ingest.scrape_time import epoch_text_time, epoch_to_utc
from kvdiag.analyzer.model import InputProblem

# A sample pair as the API writes it: [<unix seconds>, "<value>"].
_PAIR = re.compile(r'\[\s*(-?[0-9][0-9.eE+-]*)\s*,\s*"([^"\\]*)"\s*\]')
_SNIFF = re.compile(r'"resultType"\s*:\s*"(?:vector|matrix|scalar|string)"')


@dataclass
class _Series:
    """The series of a document, in document order, with their sample pairs."""

    heads: list[str] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    pairs: list[Any] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # per series: its query, or ""
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


class PromApiIngester(Ingester):
    """Reads Prometheus HTTP API query results (vector and matrix) saved as JSON."""

    kind = "prom_api"
    description = "Prometheus HTTP API JSON (/api/v1/query, /api/v1/query_range) saved to a file"
    tables = ("metric_samples", "config", "gpu_snapshots")

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        return 90 if head.lstrip().startswith(("{", "[")) and _SNIFF.search(head) else 0

    @classmethod
    def content_time_hint(cls, head: str) -> datetime | None:
        m = _PAIR.search(head)
        return None if m is None else epoch_text_time(m.group(1))

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        rel = unit.rels[0]
        with open_binary(unit.files[0]) as fh:
            text = fh.read().decode("utf-8", errors="replace")
        n_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        tally = Tally(total=n_lines)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            tally.unmatched = n_lines
            yield InputProblem(rel, exc.lineno, f"not valid JSON: {exc.msg}")
            yield tally.account(rel)
            return
        tally.parsed = n_lines
        series = _Series()
        for problem in _collect(doc, series):
            yield InputProblem(rel, None, problem)
        samples = _samples(text, series, rel, n_lines, tally)
        builder = SampleBuilder(load_aliases(), unit.replica)
        if samples.height:
            resolved = builder.build(samples)
            tally.records = resolved.samples.height
            for name, frame in (
                ("metric_samples", resolved.samples),
                ("config", resolved.config),
                ("gpu_snapshots", resolved.gpus),
            ):
                if frame.height:
                    yield TableBatch(name, frame)
        tally.notes.append(
            f"{len(series.heads)} series, {samples.height} samples; "
            f"{tally.records} samples of known metrics stored"
        )
        tally.notes += [f"{n} {why}: not stored" for why, n in series.skipped.items()]
        yield tally.account(rel)


def _collect(doc: Any, series: _Series) -> Iterator[str]:
    """Walk the document(s) into `series`; yield problems (API errors, odd shapes)."""
    for part in doc if isinstance(doc, list) else [doc]:
        if not isinstance(part, dict):
            yield f"unexpected JSON element {type(part).__name__}: not a query result"
            continue
        if part.get("status") == "error":
            yield f"query failed: {part.get('errorType', '')} {part.get('error', '')}".strip()
            continue
        data = part.get("data", part)
        kind = data.get("resultType") if isinstance(data, dict) else None
        if kind not in ("vector", "matrix"):
            series.skip(f"{kind or 'unknown'} results")
            continue
        query, named = part.get("query"), part.get("series_name")
        for item in data.get("result") or []:
            _add_series(item, kind, series, _text(query), _text(named))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _add_series(
    item: dict[str, Any], kind: str, series: _Series, query: str = "", named: str = ""
) -> None:
    labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
    name = labels.pop("__name__", None) or named or None
    pairs = [item["value"]] if kind == "vector" and "value" in item else item.get("values", [])
    if "histogram" in item or "histograms" in item:
        series.skip("native histogram series")
    series.heads.append(render_head(name, labels) if name else "")
    series.counts.append(len(pairs))
    series.queries.append(query)
    series.pairs += pairs
    if not name:
        series.skip("series without __name__ (expression results)")


def _samples(text: str, series: _Series, rel: str, n_lines: int, tally: Tally) -> pl.DataFrame:
    """One row per sample pair of a named series: head, ts, value, line and text."""
    if not series.pairs:
        return pl.DataFrame()
    index = pl.Series(range(len(series.heads))).repeat_by(pl.Series(series.counts)).explode()
    lines, raws = _pair_lines(text, len(series.pairs), n_lines, tally)
    cited = pl.Series(series.queries).gather(index)
    frame = pl.DataFrame(
        {
            "head": pl.Series(series.heads).gather(index),
            "_t": [str(p[0]) for p in series.pairs],
            "value": [str(p[1]) for p in series.pairs],
            "source_line": pl.Series(lines, dtype=pl.Int64),
            "raw": pl.Series(raws, dtype=pl.String),
        }
    ).with_columns(  # the query the sample came from is part of its provenance
        pl.when(cited != "").then(pl.col("raw") + " from " + cited).otherwise(pl.col("raw"))
    )
    return frame.filter(pl.col("head") != "").select(
        pl.lit(rel).alias("source_path"),
        "source_line",
        "raw",
        epoch_to_utc(pl.col("_t")).alias("ts"),
        "head",
        pl.col("value").cast(pl.Float64, strict=False),
        pl.lit(None, pl.Int64).alias("scrape"),
    )


def _pair_lines(
    text: str, expected: int, n_lines: int, tally: Tally
) -> tuple[list[int | None], list[str | None]]:
    """Line and text of every sample pair, in document order, when they can be told."""
    matches = list(_PAIR.finditer(text))
    if len(matches) != expected:
        tally.notes.append(
            f"{len(matches)} sample pairs found in the text for {expected} parsed: "
            "samples cite the file, not a line"
        )
        return [None] * expected, [None] * expected
    raws: list[str | None] = [re.sub(r"\s+", " ", m.group(0)) for m in matches]
    if n_lines <= 1:
        tally.notes.append("one-line JSON: samples cite the file, not a line")
        return [None] * expected, raws
    widths = pl.Series(text.split("\n")).str.len_chars() + 1
    starts = widths.cum_sum() - widths  # character offset where each line starts
    positions = pl.Series([m.start() for m in matches], dtype=pl.Int64)
    lines: list[int | None] = starts.search_sorted(positions, side="right").to_list()
    return lines, raws
