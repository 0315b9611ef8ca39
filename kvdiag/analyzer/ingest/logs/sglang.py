"""SGLang server logs: the vLLM log machinery run with SGLang's format pack.

Reading, repairs, timestamps, line accounting and the event tables are the vLLM ingester's
(`VllmLogIngester.ingest` with `formats/sglang_log.toml`); this module adds only what SGLang
prints differently:
- the pool line gives K and V separately: the pool's GiB is their sum;
- a KV allocation failure is one exception over several header-less lines (`Decode out of
  memory...`, `Try to allocate N tokens.`, `Avaliable tokens: N`, the allocator's sizes): the
  pack matches each line, and the lines that follow a failure are folded into its row;
- the rank suffix of SGLang's header (` TP13`, ` DP1 TP0 EP0`) is the process, without the
  space that separates it from the time;
- configuration rows are SGLang's (`engine` "sglang"), so its own names (tp_size, page_size,
  max_running_requests) resolve through SGLang's table in kvdiag/domain/engine_settings.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

import polars as pl

from kvdiag.analyzer.ingest.base import Account, Emit, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.engine_log import EngineLogIngester
from kvdiag.analyzer.ingest.logs.steps import pack_events

PACK = "sglang_log"
# SGLang's header, after an optional container or pod prefix; with a rank suffix it is
# SGLang's alone (a collector's `[date time]` stamp has none).
_HEADER = re.compile(
    r"(?m)^(?:\S+ )?\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"(?P<ranks>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] "
)
_FAILED = "sglang_kv_alloc_failed"
_QUOTED = 70  # a pasted fragment: SGLang messages without the logger header
_DETAIL = "sglang_kv_alloc_detail"
_DETAIL_COLUMNS = ("requested_tokens", "available_tokens", "evictable_tokens")
_DETAIL_SPAN = 4  # lines a failure's numbers follow it by, at most (0.4.6 prints four)


class SglangLogIngester(EngineLogIngester):
    """Reads SGLang server logs of any version (0.2 to 0.5), plain or with TP/DP/EP/PP ranks."""

    kind = "sglang_log"
    description = "SGLang server log (launch_server: scheduler, tokenizer manager, uvicorn)"
    pack_name = PACK
    quoted = _QUOTED

    @classmethod
    def header(cls) -> re.Pattern[str]:
        return _HEADER

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        """Above the vLLM ingester's 90 and 60 whenever SGLang's own messages are there."""
        events = pack_events(PACK, head)
        headers = [m.group("ranks") for m in _HEADER.finditer(head)]
        if events and headers:
            return 95
        if events:
            return _QUOTED
        return 50 if any(headers) else 0

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        failures: list[pl.DataFrame] = []  # a file's allocation-failure rows, folded at its end
        for emit in super().ingest(unit, ctx):
            if isinstance(emit, TableBatch) and emit.table == "log_capacity_errors":
                failures.append(_shaped(emit).frame)
            elif isinstance(emit, TableBatch):
                yield _shaped(emit)
            elif isinstance(emit, Account) and failures:
                rows, folded = _fold_details(pl.concat(failures, how="diagonal_relaxed"))
                failures = []
                yield TableBatch("log_capacity_errors", rows)
                yield dataclasses.replace(emit, records=emit.records - folded)
            else:
                yield emit


def _shaped(batch: TableBatch) -> TableBatch:
    """A table batch with SGLang's differences applied (see the module docstring)."""
    frame = batch.frame
    if batch.table == "config":
        frame = frame.with_columns(pl.lit("sglang").alias("engine"))
    if "k_gib" in frame.columns and "v_gib" in frame.columns:
        frame = frame.with_columns(
            pl.coalesce("gib", pl.col("k_gib") + pl.col("v_gib")).alias("gib")
        )
    if "process" in frame.columns:
        frame = frame.with_columns(pl.col("process").str.strip_chars())
    return TableBatch(batch.table, frame)


def _fold_details(rows: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Allocation failures with the numbers of the lines after them; (rows, lines folded).

    A number line with no failure just above it (a paste that starts mid-message) stays a row
    of its own: nothing is dropped.
    """
    rows = rows.with_columns(
        pl.lit(None, pl.Int64).alias(c) for c in _DETAIL_COLUMNS if c not in rows.columns
    ).sort("source_path", "source_line")
    heads = rows.filter(pl.col("event") == _FAILED)
    details = rows.filter(pl.col("event") == _DETAIL)
    if heads.is_empty() or details.is_empty():
        return rows, 0
    keys = heads.select("source_path", pl.col("source_line").alias("head_line"))
    owned = details.join_asof(
        keys,
        left_on="source_line",
        right_on="head_line",
        by="source_path",
        strategy="backward",
        tolerance=_DETAIL_SPAN,
        check_sortedness=False,  # sorted above, per file
    ).filter(pl.col("head_line").is_not_null())
    numbers = owned.group_by("source_path", "head_line").agg(
        *[pl.col(c).drop_nulls().first().alias(f"_{c}") for c in _DETAIL_COLUMNS],
        pl.col("source_line").max().alias("_end"),
        pl.col("raw").str.join("\n").alias("_raw"),
    )
    merged = heads.join(
        numbers,
        left_on=["source_path", "source_line"],
        right_on=["source_path", "head_line"],
        how="left",
    ).with_columns(
        *[pl.coalesce(c, f"_{c}").alias(c) for c in _DETAIL_COLUMNS],
        pl.coalesce("_end", "source_line_end").alias("source_line_end"),
        pl.when(pl.col("_raw").is_not_null())
        .then(pl.concat_str("raw", "_raw", separator="\n"))
        .otherwise("raw")
        .alias("raw"),
    )
    folded_lines = owned.select("source_path", "source_line")
    rest = rows.filter(pl.col("event") != _FAILED).join(
        folded_lines, on=["source_path", "source_line"], how="anti"
    )
    out = pl.concat([merged.select(rows.columns), rest], how="vertical_relaxed")
    return out.sort("source_path", "source_line"), owned.height
