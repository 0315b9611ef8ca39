"""TensorRT-LLM logs: the vLLM log machinery run with TensorRT-LLM's format pack.

Reading, repairs, line accounting and the event tables are the vLLM ingester's
(`VllmLogIngester.ingest` with `formats/trtllm_log.toml`); this module adds what TensorRT-LLM
states differently:
- the Python logger's stamp is `MM/DD/YYYY-HH:MM:SS` (logging's asctime with TRT-LLM's datefmt)
  and the newer C++ logger's `MM-DD-YYYY HH:MM:SS.ffffff`, the server's local time with its
  year, which the shared timestamp reader does not take;
- the PyTorch backend sizes its KV cache twice: a small cache for a profiling pass (its pool
  lines, its executor limits and the windows it cut describe that temporary cache), then,
  after "Estimated max memory in KV cache", the real one. Rows of the profiling pass are kept
  as log_memory rows (`trtllm_profiling_pass`, raw text and all) so that the pool, the
  limits and the refusals the rules read are the server's;
- the 0.5-0.9 refusal prints the length one sequence needs as a product
  (tokensPerBlock x maxBlocksPerSeq), computed here;
- configuration rows are TensorRT-LLM's (`engine` "trtllm").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

import polars as pl

from kvdiag.analyzer.ingest.base import Account, Emit, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.config_rows import CONFIG_COLUMNS
from kvdiag.analyzer.ingest.logs.engine_log import EngineLogIngester
from kvdiag.analyzer.schema import table

PACK = "trtllm_log"
ENGINE = "trtllm"
# TensorRT-LLM's own logger prefixes (C++ and Python): no other engine prints them.
_HEADER = re.compile(
    r"(?m)^(?:\S.*?)?(?:\[TensorRT-LLM\]\[(?:TRACE|DEBUG|INFO|WARNING|ERROR)\] "
    r"|\[TRT-LLM\] (?:\[(?:MPI_Rank|RANK) \d+\] )?\[[FEWIVD]\] "
    r"|\[TensorRT-LLM\] TensorRT-LLM version: )"
)
# The Python logger's asctime, and the newer C++ logger's getCurrentTimestamp.
_STAMPS = (
    (r"^\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d$", "%m/%d/%Y-%H:%M:%S"),
    (r"^\d\d-\d\d-\d{4} \d\d:\d\d:\d\d\.\d{6}$", "%m-%d-%Y %H:%M:%S%.f"),
)
_PROFILING_END = "trtllm_kv_estimate"  # after this line the KV cache is rebuilt at full size
_PASS_START = "banner"  # a new process: a profiling pass never spans a restart
# Tables whose rows of the profiling pass describe the temporary cache, not the server's.
_PASS_TABLES = ("log_kv_pool", "log_capacity_errors", "log_engine", "config")
# The profiling line prints the fraction as the float32 it is stored in (0.8999999761581421).
_FRACTION = r"fraction is set (\d+(?:\.\d+)?)"
_NEEDED = re.compile(r"tokensPerBlock \((\d+)\) \* maxBlocksPerSeq \((\d+)\)")


class TrtllmLogIngester(EngineLogIngester):
    """Reads TensorRT-LLM logs (trtllm-serve, the LLM API, the Triton TRT-LLM backend)."""

    kind = "trtllm_log"
    description = "TensorRT-LLM log (KV cache manager sizing, executor limits, cut windows)"
    pack_name = PACK

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        # The profiling pass ends at a later line: a file's rows are held until its end.
        held: dict[str, list[pl.DataFrame]] = {}
        for emit in super().ingest(unit, ctx):
            if isinstance(emit, TableBatch):
                held.setdefault(emit.table, []).append(_dated(emit.frame))
            elif isinstance(emit, Account):
                stamped = _own_stamps(held)
                yield from _release(held)
                held = {}
                yield dataclasses.replace(emit, notes=_year_note(emit.notes, stamped))
            else:
                yield emit
        yield from _release(held)

    @classmethod
    def header(cls) -> re.Pattern[str]:
        return _HEADER


def _own_stamps(held: dict[str, list[pl.DataFrame]]) -> bool:
    """Some row was timed by TensorRT-LLM's own stamp (which prints its year)."""
    shapes = "|".join(shape for shape, _ in _STAMPS)
    return any(
        "ts_raw" in f.columns and bool(f["ts_raw"].str.contains(shapes).any())
        for frames in held.values()
        for f in frames
    )


def _year_note(notes: tuple[str, ...], stamped: bool) -> tuple[str, ...]:
    """The shared reader's note on where a year came from is about stamps without one;
    TensorRT-LLM's own stamps print theirs (the server's local time, read as UTC)."""
    if not stamped:
        return notes
    own = "times from TensorRT-LLM's own stamps (with their year; the server's local time)"
    return tuple(own if n.startswith("year ") else n for n in notes)


def _dated(frame: pl.DataFrame) -> pl.DataFrame:
    """`ts` from TensorRT-LLM's own stamps (MM/DD/YYYY-HH:MM:SS, MM-DD-YYYY HH:MM:SS.ffffff)
    where no other stamp gave one."""
    if "ts" not in frame.columns or "ts_raw" not in frame.columns:
        return frame
    raw = pl.col("ts_raw")
    own = [
        pl.when(raw.str.contains(shape)).then(
            raw.str.strptime(pl.Datetime("us"), fmt, strict=False)
        )
        for shape, fmt in _STAMPS
    ]
    return frame.with_columns(pl.coalesce(pl.col("ts"), *own).alias("ts"))


def _release(held: dict[str, list[pl.DataFrame]]) -> Iterator[TableBatch]:
    """The held rows, the profiling pass moved to log_memory, TensorRT-LLM's own words set."""
    frames = {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in held.items() if fs}
    passes = _profiling_passes(frames)
    moved: list[pl.DataFrame] = []
    for name, frame in frames.items():
        if name in _PASS_TABLES and passes:
            inside = _in_pass(frame, passes)
            if name == "config":
                # A setting is stated once unless its value changes: the pass's statement
                # stands unless the server restated the key (max_seq_len cut again).
                later = frame.filter(~inside)["key"].unique()
                frame = frame.filter(~(inside & pl.col("key").is_in(later.implode())))
            else:
                moved.append(frame.filter(inside))
                frame = frame.filter(~inside)
        if name == "config":
            frame = frame.with_columns(pl.lit(ENGINE).alias("engine"))
        if name == "log_capacity_errors":
            frame = _needed_length(frame)
        if name == "log_kv_pool":
            frame = _pool_tokens(frame)
        if frame.height:
            yield TableBatch(name, frame)
    if any(m.height for m in moved):
        yield TableBatch("log_memory", _as_profiling(moved))
    fraction = _fraction_rows(frames.get("log_memory"))
    if fraction.height:
        yield TableBatch("config", fraction)


def _profiling_passes(frames: dict[str, pl.DataFrame]) -> list[tuple[str, int, int]]:
    """(file, first line, end line) of each profiling pass: from the process start (or the
    previous estimate) to the estimate that ends it."""
    memory, engine = frames.get("log_memory"), frames.get("log_engine")
    if memory is None or "event" not in memory.columns:
        return []
    ends = memory.filter(pl.col("event") == _PROFILING_END).select("source_path", "source_line")
    starts = (
        engine.filter(pl.col("event") == _PASS_START).select("source_path", "source_line")
        if engine is not None and "event" in engine.columns
        else pl.DataFrame(schema={"source_path": pl.String, "source_line": pl.Int64})
    )
    passes = []
    for path, end in ends.iter_rows():
        before = [
            line for p, line in [*starts.iter_rows(), *ends.iter_rows()] if p == path and line < end
        ]
        passes.append((str(path), max(before, default=0), int(end)))
    return passes


def _in_pass(frame: pl.DataFrame, passes: list[tuple[str, int, int]]) -> pl.Expr:
    cond = pl.lit(False)
    for path, start, end in passes:
        cond = cond | (
            (pl.col("source_path") == path)
            & (pl.col("source_line") > start)
            & (pl.col("source_line") < end)
        )
    return cond


def _as_profiling(moved: list[pl.DataFrame]) -> pl.DataFrame:
    """The profiling pass's rows as log_memory rows: provenance, time, the cache's GiB."""
    columns = table("log_memory").column_names
    out = []
    for frame in moved:
        if not frame.height:
            continue
        kv = pl.col("gib") if "gib" in frame.columns else pl.lit(None, pl.Float64)
        frame = frame.with_columns(
            kv.alias("kv_gib"), pl.lit("trtllm_profiling_pass").alias("event")
        )
        out.append(frame.select([c for c in columns if c in frame.columns]))
    return pl.concat(out, how="diagonal_relaxed").sort("source_path", "source_line")


def _needed_length(frame: pl.DataFrame) -> pl.DataFrame:
    """The 0.5-0.9 refusal's length of one sequence: tokensPerBlock x maxBlocksPerSeq."""
    if "message" not in frame.columns:
        return frame
    if "max_model_len" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("max_model_len"))
    parts = pl.col("message").str.extract_groups(_NEEDED.pattern)
    product = parts.struct.field("1").cast(pl.Int64) * parts.struct.field("2").cast(pl.Int64)
    return frame.with_columns(pl.coalesce(pl.col("max_model_len"), product).alias("max_model_len"))


def _pool_tokens(frame: pl.DataFrame) -> pl.DataFrame:
    """The window line's pool in tokens: primary blocks x tokens per block (the KV cache
    manager's own maxNumTokens; its [MemUsageChange] line prints the same product)."""
    if not {"blocks", "block_size", "event"} <= set(frame.columns):
        return frame
    if "tokens" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("tokens"))
    product = pl.col("blocks") * pl.col("block_size")
    stated = pl.col("event") == "trtllm_window_blocks"
    return frame.with_columns(
        pl.when(stated).then(pl.coalesce("tokens", product)).otherwise("tokens").alias("tokens")
    )


def _fraction_rows(memory: pl.DataFrame | None) -> pl.DataFrame:
    """free_gpu_memory_fraction from the profiling line, as a config row: the setting in
    effect (the YAML's kv_cache_config.free_gpu_memory_fraction or the flag), printed as a
    float32 and stated here to six significant digits (0.8999999761581421 -> 0.9)."""
    schema = {c: pl.Int64 if c == "source_line" else pl.String for c in CONFIG_COLUMNS}
    if memory is None or "event" not in memory.columns:
        return pl.DataFrame(schema=schema)
    rows = memory.filter(pl.col("event") == "trtllm_profiling_peak").with_columns(
        pl.col("raw").str.extract(_FRACTION, 1).cast(pl.Float64, strict=False).alias("_f")
    )
    rows = rows.filter(pl.col("_f").is_not_null()).head(1)
    value = [f"{f:.6g}" for f in rows["_f"].to_list()]
    return rows.with_columns(
        pl.lit("free_gpu_memory_fraction").alias("key"),
        pl.Series("value", value, pl.String),
        pl.lit("log").alias("origin"),
        pl.lit(ENGINE).alias("engine"),
    ).select(list(schema))
