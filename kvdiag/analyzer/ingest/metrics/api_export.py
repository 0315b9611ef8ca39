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

from kvdiag.analyzer.ingest.base import (
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    Tally,
)
from kvdiag.analyzer.ingest.metrics.api_pairs import PairArray, split_pairs
from kvdiag.analyzer.ingest.metrics.exposition_parse import render_head
from kvdiag.analyzer.ingest.metrics.scrape_time import epoch_text_time, epoch_to_utc
from kvdiag.analyzer.ingest.metrics.tables import SampleBuilder
from kvdiag.analyzer.ingest.rows import count_lines, load_json, read_text, undecodable_lines
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.domain.records.diagnosis import InputProblem

# A sample pair as the API writes it: [<unix seconds>, "<value>"].
_PAIR_TEXT = r'\[\s*(?P<t>-?[0-9][0-9.eE+-]*)\s*,\s*"(?P<value>[^"\\]*)"\s*\]'
_PAIR = re.compile(_PAIR_TEXT)  # groups 1 and 2: time and value
_PAIR_GROUPS = f"(?P<pair>{_PAIR_TEXT})"  # the whole pair too, for polars' extract_groups
# Samples resolved and stored at a time: a day of a fleet's series is ~700,000 samples in
# one file, too many store rows (labels, text and query each) to hold at once. Two of
# DuckDB's row groups (122,880 rows): an insert of less goes through its write-ahead log.
CHUNK_ROWS = 2 * 122_880
_SNIFF = re.compile(r'"resultType"\s*:\s*"(?:vector|matrix|scalar|string)"')


@dataclass
class _Series:
    """The series of a document, in document order, with their sample pairs."""

    heads: list[str] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    pairs: list[Any] = field(default_factory=list)  # pairs that json.loads made objects of
    arrays: list[PairArray] = field(default_factory=list)  # pairs left as text (api_pairs.py)
    queries: list[str] = field(default_factory=list)  # per series: its query, or ""
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


class PromApiIngester(Ingester):
    """Reads Prometheus HTTP API query results (vector and matrix) saved as JSON."""

    kind = "prom_api"
    description = "Prometheus HTTP API JSON (/api/v1/query, /api/v1/query_range) saved to a file"
    tables = ("metric_samples", "config", "gpu_snapshots")
    max_bytes = 256 << 20  # read whole and parsed as one document

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        return 90 if head.lstrip().startswith(("{", "[")) and _SNIFF.search(head) else 0

    @classmethod
    def content_time_hint(cls, head: str) -> datetime | None:
        m = _PAIR.search(head)
        return None if m is None else epoch_text_time(m.group(1))

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        rel = unit.rels[0]
        small = read_text(unit.files[0], self.max_bytes)
        text = small.text
        n_lines = count_lines(text)
        tally = Tally(total=n_lines)
        if small.broken:
            yield InputProblem(rel, None, small.broken)
        found, problem = load_json(small, self.max_bytes, parse=split_pairs)
        if problem is not None:
            tally.undecodable = undecodable_lines(text)
            tally.unmatched = n_lines - tally.undecodable
            yield InputProblem(rel, problem[0], problem[1])
            yield tally.account(rel)
            return
        tally.parsed = n_lines
        series, samples = _read(text, found, rel, n_lines, tally)
        for message in series.problems:
            yield InputProblem(rel, None, message)
        builder = SampleBuilder(load_aliases(), unit.replica)
        for chunk in samples.iter_slices(CHUNK_ROWS):
            resolved = builder.build(chunk)
            tally.records += resolved.samples.height
            yield from resolved.batches()
        tally.notes.append(
            f"{len(series.heads)} series, {samples.height} samples; "
            f"{tally.records} samples of known metrics stored"
        )
        tally.notes += [f"{n} {why}: not stored" for why, n in series.skipped.items()]
        yield tally.account(rel)


def _read(
    text: str, found: tuple[Any, list[PairArray]], rel: str, n_lines: int, tally: Tally
) -> tuple[_Series, pl.DataFrame]:
    """The document's series and samples: from the pair arrays' text when every series
    kept its pairs as text and the document has lines to cite, else from a full parse."""
    series = _series_of(found[0])
    if series.arrays and not series.pairs and n_lines > 1:
        pairs = _pairs_of_arrays(text, series.arrays)
        if pairs is not None:
            return series, _frame(pairs, series, rel)
    if series.arrays:  # pairs across lines, or some parsed and some kept: parse them all
        series = _series_of(json.loads(text))
    return series, _samples(text, series, rel, n_lines, tally)


def _series_of(doc: Any) -> _Series:
    series = _Series()
    series.problems = list(_collect(doc, series))
    return series


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
            series.skip(f"{kind if isinstance(kind, str) else 'unknown'} results")
            continue
        result = data.get("result") or []
        if not isinstance(result, list):
            series.skip("results that are not a list of series")
            continue
        query, named = part.get("query"), part.get("series_name")
        for item in result:
            _add_series(item, kind, series, _text(query), _text(named))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _is_pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2


def _add_series(item: Any, kind: str, series: _Series, query: str = "", named: str = "") -> None:
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(item, dict) or not isinstance(metric, dict | None):
        series.skip("series that are not objects with labels")
        return
    labels = {str(k): str(v) for k, v in (metric or {}).items()}
    name = labels.pop("__name__", None) or named or None
    listed = [item["value"]] if kind == "vector" and "value" in item else item.get("values", [])
    if isinstance(listed, PairArray):
        series.arrays.append(listed)
        count = listed.count
    else:
        listed = listed if isinstance(listed, list) else [listed]
        pairs = [p for p in listed if _is_pair(p)]
        if len(pairs) < len(listed):
            series.skip("sample pairs that are not [time, value]")
        series.pairs += pairs
        count = len(pairs)
    if "histogram" in item or "histograms" in item:
        series.skip("native histogram series")
    series.heads.append(render_head(name, labels) if name else "")
    series.counts.append(count)
    series.queries.append(query)
    if not name:
        series.skip("series without __name__ (expression results)")


def _samples(text: str, series: _Series, rel: str, n_lines: int, tally: Tally) -> pl.DataFrame:
    """One row per sample pair of a named series (pairs parsed by json.loads)."""
    if not series.pairs:
        return pl.DataFrame()
    values = pl.Series([str(p[1]) for p in series.pairs], dtype=pl.String)
    found = _pairs_by_line(text, values) if n_lines > 1 else None
    lines, raws = found if found is not None else _pair_lines(text, len(values), n_lines, tally)
    pairs = _Pairs(
        pl.Series([str(p[0]) for p in series.pairs], dtype=pl.String),
        values,
        pl.Series(lines, dtype=pl.Int64),
        pl.Series(raws, dtype=pl.String),
    )
    return _frame(pairs, series, rel)


@dataclass(frozen=True, slots=True)
class _Pairs:
    """Every sample pair of a document in document order: time and value as written, the
    line it starts on and its text."""

    t: pl.Series
    value: pl.Series
    line: pl.Series
    raw: pl.Series


def _frame(pairs: _Pairs, series: _Series, rel: str) -> pl.DataFrame:
    """Store-ready sample rows (head, ts, value, provenance) of the named series."""
    index = pl.Series(range(len(series.heads))).repeat_by(pl.Series(series.counts)).explode()
    cited = pl.Series(series.queries).gather(index)
    frame = pl.DataFrame(
        {
            "head": pl.Series(series.heads).gather(index),
            "_t": pairs.t,
            "value": pairs.value,
            "source_line": pairs.line,
            "raw": pairs.raw,
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


def _pairs_of_arrays(text: str, arrays: list[PairArray]) -> _Pairs | None:
    """The pairs of arrays kept as text, read by polars from each array's lines; None when
    a pair is spread over lines (`jq .` writes each number on its own line)."""
    first_lines, line, at = [], 1, 0
    for array in arrays:  # the line each array starts on, counting forward once
        line += text.count("\n", at, array.start)
        at = array.start
        first_lines.append(line)
    per_array = pl.Series([array.text(text) for array in arrays], dtype=pl.String).str.split("\n")
    numbers = (
        pl.Series(first_lines, dtype=pl.Int64).repeat_by(per_array.list.len()).explode()
        + pl.int_ranges(0, per_array.list.len(), eager=True).explode()
    )
    # The arrays hold nothing but pairs: any missing from the lines spans lines.
    return _pairs_on_lines(per_array.explode(), numbers, sum(a.count for a in arrays))


def _pairs_by_line(text: str, values: pl.Series) -> tuple[pl.Series, pl.Series] | None:
    """Line and text of every pair when each lies within one line (vectorised), else None.

    Saved query results (kvdiag's own, or `jq .` output) hold a pair per line; the pairs
    found line by line must be exactly the parsed ones, in order, or the slow path decides.
    """
    lines = pl.Series([text]).str.split("\n").explode()
    numbers = pl.int_range(1, lines.len() + 1, eager=True, dtype=pl.Int64)
    pairs = _pairs_on_lines(lines, numbers, values.len())
    if pairs is None or not pairs.value.equals(values):
        return None
    return pairs.line, pairs.raw


def _pairs_on_lines(lines: pl.Series, numbers: pl.Series, expected: int) -> _Pairs | None:
    """The pairs found within lines (numbered by `numbers`), or None unless `expected`."""
    counts = lines.str.count_matches(_PAIR.pattern)
    if counts.sum() != expected:
        return None
    holding = counts > 0
    if counts.max() == 1:  # a pair per line, as kvdiag writes them: one regex pass
        parts = lines.filter(holding).str.extract_groups(_PAIR_GROUPS).struct
        at = numbers.filter(holding)
    else:  # several pairs on a line (compact JSON spread over a few lines)
        found = lines.str.extract_all(_PAIR.pattern).explode().drop_nulls()
        parts = found.str.extract_groups(_PAIR_GROUPS).struct
        at = numbers.filter(holding).repeat_by(counts.filter(holding)).explode()
    raw = parts.field("pair")
    # Raw text with runs of white space made one space; most files have none to change.
    if raw.str.contains(r"\s\s|[^\S ]").any():
        raw = raw.str.replace_all(r"\s+", " ")
    return _Pairs(parts.field("t"), parts.field("value"), at, raw)


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
