"""TensorRT-LLM iteration stats saved from trtllm-serve's JSON `/metrics` (or `llm.get_stats()`).

trtllm-serve's `/metrics` answers a JSON list of the iteration stats queued since the last
poll (with `enable_iter_perf_stats: true`; each poll drains the queue, so a saved dump is
the polls appended: one list per poll, or one list). An entry's shape (docs/source/commands/
trtllm-serve/trtllm-serve.rst's example; tensorrt_llm/metrics/collector.py
log_iteration_stats reads the same keys):

    {"gpuMemUsage": 76665782272, "iter": 154, "iterLatencyMS": 7.0, "numActiveRequests": 1,
     "numQueuedRequests": 0, "timestamp": "12-02-2025 10:11:12.123456",
     "kvCacheStats": {"maxNumBlocks": 101256, "freeNumBlocks": 101253, "usedNumBlocks": 3,
                      "tokensPerBlock": 32, "cacheHitRate": 0.00128, ...}, ...}

Each value becomes a sample under the Prometheus name the server's own collector gives it
(`/prometheus/metrics`), so the alias table and the rules read both alike:
numActiveRequests -> trtllm_num_requests_running, numQueuedRequests ->
trtllm_num_requests_waiting, gpuMemUsage -> trtllm_gpu_memory_usage_bytes, the kvCacheStats
counts -> trtllm_kv_cache_{max,free,used}_blocks / _tokens_per_block / _hit_rate. The usage
fraction is not in the stats: it is DERIVED here as usedNumBlocks / maxNumBlocks, as the
collector derives trtllm_kv_cache_utilization, and each such sample's raw text says so.

An entry's time is its `timestamp` (the C++ executor's getCurrentTimestamp: local
`%m-%d-%Y %H:%M:%S.%f`, read as UTC as the logs' local stamps are); without one, the file's
name when it is a scrape time (`<unix seconds>.json`), else none (the report says so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import polars as pl

from kvdiag.analyzer.ingest.base import Emit, IngestContext, Ingester, InputUnit, Tally
from kvdiag.analyzer.ingest.metrics.scrape_time import epoch_text_time
from kvdiag.analyzer.ingest.metrics.tables import SampleBuilder
from kvdiag.analyzer.ingest.rows import count_lines, read_text
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.domain.records.diagnosis import InputProblem

_SNIFF = re.compile(r'"kvCacheStats"\s*:|"numActiveRequests"\s*:\s*\d[^{}]*"iterLatencyMS"')
_EPOCH_NAME = re.compile(r"(?:^|/)(?P<t>\d{9,13}(?:\.\d+)?)\.json$")
_STAMP_FORMATS = ("%m-%d-%Y %H:%M:%S.%f", "%m-%d-%Y %H:%M:%S")
# (key in the entry, the server's Prometheus name): top level, then kvCacheStats.
_TOP = (
    ("numActiveRequests", "trtllm_num_requests_running"),
    ("numQueuedRequests", "trtllm_num_requests_waiting"),
    ("gpuMemUsage", "trtllm_gpu_memory_usage_bytes"),
)
_KV = (
    ("maxNumBlocks", "trtllm_kv_cache_max_blocks"),
    ("freeNumBlocks", "trtllm_kv_cache_free_blocks"),
    ("usedNumBlocks", "trtllm_kv_cache_used_blocks"),
    ("tokensPerBlock", "trtllm_kv_cache_tokens_per_block"),
    ("cacheHitRate", "trtllm_kv_cache_hit_rate"),
)
_USAGE = "trtllm_kv_cache_utilization"
_LABELS = '{source="iteration_stats"}'


class TrtllmStatsIngester(Ingester):
    """Reads TensorRT-LLM iteration stats saved from trtllm-serve's JSON /metrics."""

    kind = "trtllm_stats"
    description = "TensorRT-LLM iteration stats (trtllm-serve's JSON /metrics) saved to a file"
    tables = ("metric_samples",)
    max_bytes = 256 << 20  # read whole: a dump of polls

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        return 90 if head.lstrip().startswith(("[", "{")) and _SNIFF.search(head) else 0

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        rel = unit.rels[0]
        small = read_text(unit.files[0], self.max_bytes)
        tally = Tally(total=count_lines(small.text))
        if small.broken or small.cut:
            yield InputProblem(rel, None, small.broken or f"larger than {self.max_bytes:,} bytes")
        entries, problem = _entries(small.text)
        if problem is not None:
            yield InputProblem(rel, problem[0], problem[1])
        fallback = _name_time(rel)
        rows = [row for line, entry in entries for row in _samples(rel, line, entry, fallback)]
        tally.parsed = tally.total if problem is None else (problem[0] or 1) - 1
        tally.unmatched = tally.total - tally.parsed
        frame = pl.DataFrame(rows, schema=_SCHEMA, orient="row")
        resolved = SampleBuilder(load_aliases(), unit.replica).build(frame)
        tally.records = resolved.samples.height
        yield from resolved.batches()
        untimed = frame.filter(pl.col("ts").is_null()).height
        tally.notes.append(
            f"{len(entries)} iterations, {tally.records} samples; kv_cache_usage derived as "
            "usedNumBlocks / maxNumBlocks (trtllm-serve's own trtllm_kv_cache_utilization)"
        )
        if untimed:
            tally.notes.append(f"{untimed} samples without a time (no timestamp, no scrape time)")
        yield tally.account(rel)


_SCHEMA: dict[str, pl.DataType] = {
    "source_path": pl.String(),
    "source_line": pl.Int64(),
    "raw": pl.String(),
    "ts": pl.Datetime("us"),
    "head": pl.String(),
    "value": pl.Float64(),
}


def _entries(text: str) -> tuple[list[tuple[int, dict[str, Any]]], tuple[int, str] | None]:
    """(line, entry) of every iteration: the text is one or more JSON lists or objects (polls
    appended). Parsing stops at the first value that is not JSON, which is reported."""
    decoder, pos = json.JSONDecoder(), 0
    out: list[tuple[int, dict[str, Any]]] = []
    line, counted = 1, 0  # the line of `counted`, advanced as entries are found
    while (pos := _skip(text, pos)) < len(text):
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            return out, (exc.lineno, f"not valid JSON: {exc.msg}")
        if isinstance(value, dict):
            line, counted = line + text.count("\n", counted, pos), pos
            out.append((line, value))
        pos = end
    return out, None


def _skip(text: str, pos: int) -> int:
    """Past what stands between entries: blanks, commas, and the brackets of the lists that
    hold a poll's iterations (an entry itself is decoded whole)."""
    while pos < len(text) and text[pos] in " \t\r\n,[]":
        pos += 1
    return pos


def _samples(
    rel: str, line: int, entry: dict[str, Any], fallback: datetime | None
) -> Iterator[tuple[Any, ...]]:
    ts = _entry_time(entry.get("timestamp")) or fallback
    where = f"iter {entry.get('iter', '?')}"
    found = entry.get("kvCacheStats")
    kv: dict[str, Any] = found if isinstance(found, dict) else {}
    for source, keys in ((entry, _TOP), (kv, _KV)):
        for key, name in keys:
            value = source.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield rel, line, f"{where}: {key} {value}", ts, name + _LABELS, float(value)
    used, most = kv.get("usedNumBlocks"), kv.get("maxNumBlocks")
    if isinstance(used, int | float) and isinstance(most, int | float) and most > 0:
        raw = f"{where}: usedNumBlocks {used} / maxNumBlocks {most} (derived usage fraction)"
        yield rel, line, raw, ts, _USAGE + _LABELS, float(used) / float(most)


def _entry_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    for fmt in _STAMP_FORMATS:
        try:
            return datetime.strptime(value.strip(), fmt)
        except ValueError:
            continue
    return None


def _name_time(rel: str) -> datetime | None:
    m = _EPOCH_NAME.search(rel)
    return epoch_text_time(m.group("t")) if m else None
