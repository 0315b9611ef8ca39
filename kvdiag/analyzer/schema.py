"""The store's tables, declared as data: name, purpose, columns with types and meaning.

`store.py` turns these into DDL; `kvdiag tables` and the README print them for people who
keep the database with `--db` and query it with SQL. Every table that holds what an input
said carries provenance: `source_path` (relative to the incident folder), `source_line`
(1-based) and `raw` (the line as read, control characters removed).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # DuckDB type
    doc: str


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _cols(*specs: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in specs)


PROVENANCE = _cols(
    ("source_path", "VARCHAR", "file, relative to the incident folder"),
    ("source_line", "BIGINT", "1-based line in that file (NULL for whole-file facts)"),
    ("raw", "VARCHAR", "the line as read (ANSI and control characters removed)"),
)

# Every log-derived table starts with these: who said it, and when.
LOG_ENVELOPE = PROVENANCE + _cols(
    ("replica", "VARCHAR", "replica: pod/host name if printed, else the file's folder or name"),
    ("ts", "TIMESTAMP", "time of the line (UTC assumed); NULL when the line has none"),
    ("ts_raw", "VARCHAR", "the time exactly as printed, e.g. '11-29 13:34:39'"),
    ("process", "VARCHAR", "process name from the (Name pid=N) prefix: EngineCore, Worker_TP3 ..."),
    ("pid", "BIGINT", "process id from the prefix"),
    ("rank", "INTEGER", "tensor-parallel rank when the process name or [rankN] gives it"),
    ("level", "VARCHAR", "log level"),
)

SCRAPE_ENVELOPE = PROVENANCE + _cols(
    ("replica", "VARCHAR", "the `instance` label, else the folder or file the scrape came from"),
    ("ts", "TIMESTAMP", "scrape time (UTC) from the file name, a marker line or the sample"),
)

TABLES: tuple[Table, ...] = (
    Table(
        "inputs",
        "One row per file of the incident folder and what became of it.",
        _cols(
            ("path", "VARCHAR", "file, relative to the incident folder"),
            ("kind", "VARCHAR", "ingester that read it, or 'unknown'"),
            ("status", "VARCHAR", "used | skipped | unrecognised | refused"),
            ("reason", "VARCHAR", "why, in words"),
            ("size_bytes", "BIGINT", "file size"),
            ("lines_total", "BIGINT", "lines in the file"),
            ("lines_parsed", "BIGINT", "lines matched by a declared format"),
            ("lines_unmatched", "BIGINT", "lines no format matched"),
            ("lines_undecodable", "BIGINT", "lines that were not valid text"),
            ("records", "BIGINT", "events or samples extracted"),
        ),
    ),
    Table(
        "unmatched_templates",
        "Unmatched lines grouped by shape (digits and ids masked), per file.",
        _cols(
            ("source_path", "VARCHAR", "file"),
            ("template", "VARCHAR", "the masked shape"),
            ("count", "BIGINT", "lines with this shape"),
            ("first_line", "BIGINT", "first line number with this shape"),
            ("example", "VARCHAR", "that first line"),
        ),
    ),
    Table(
        "config",
        "Engine configuration from every source (log, metrics, launch flags), one value per row.",
        PROVENANCE
        + _cols(
            ("replica", "VARCHAR", "replica"),
            ("key", "VARCHAR", "canonical key, e.g. gpu_memory_utilization, max_model_len"),
            ("value", "VARCHAR", "value as text"),
            ("origin", "VARCHAR", "log | metrics | cmdline | model_config | default"),
        ),
    ),
    Table(
        "log_kv_pool",
        "KV pool sizing lines printed at start-up (one row per line, per rank).",
        LOG_ENVELOPE
        + _cols(
            ("event", "VARCHAR", "which line shape: kv_cache_size, gpu_blocks, ..."),
            ("device", "VARCHAR", "GPU, CPU, XPU ... as printed"),
            ("tokens", "BIGINT", "pool size in tokens"),
            ("blocks", "BIGINT", "pool size in blocks"),
            ("cpu_blocks", "BIGINT", "v0 CPU swap blocks"),
            ("gib", "DOUBLE", "pool memory in GiB"),
            ("total_gib", "DOUBLE", "memory the pool was carved from, when printed"),
            ("max_model_len", "BIGINT", "max_model_len the concurrency refers to"),
            ("concurrency", "DOUBLE", "maximum concurrency at max_model_len"),
        ),
    ),
    Table(
        "log_stats",
        "Periodic engine stats lines (v0 every 5 s, v1 every 10 s, only while busy).",
        LOG_ENVELOPE
        + _cols(
            ("engine_idx", "INTEGER", "the `Engine 000:` index (v1)"),
            ("prompt_tps", "DOUBLE", "avg prompt throughput, tokens/s"),
            ("gen_tps", "DOUBLE", "avg generation throughput, tokens/s"),
            ("running", "BIGINT", "running requests"),
            ("waiting", "BIGINT", "waiting (v1) or pending (v0) requests"),
            ("swapped", "BIGINT", "swapped requests (v0)"),
            ("deferred", "BIGINT", "deferred requests (v1 0.20+)"),
            ("preemptions", "BIGINT", "preemptions since the previous stats line (v1 0.11.2+)"),
            ("kv_usage_pct", "DOUBLE", "KV cache usage of the device pool, percent"),
            ("kv_device", "VARCHAR", "device word of the usage field: GPU, CPU, XPU ..."),
            ("cpu_kv_usage_pct", "DOUBLE", "CPU swap-space usage (v0), percent"),
            ("prefix_hit_pct", "DOUBLE", "prefix cache hit rate, percent"),
        ),
    ),
    Table(
        "metric_samples",
        "Prometheus samples of the metrics kvdiag knows (canonical names), one row per sample.",
        SCRAPE_ENVELOPE
        + _cols(
            ("metric", "VARCHAR", "canonical name (see metric_aliases.toml)"),
            ("name", "VARCHAR", "name as exposed, e.g. vllm:num_preemptions_total"),
            ("suffix", "VARCHAR", "'' | bucket | sum | count | created"),
            ("engine", "VARCHAR", "`engine` label (v1), or tp_rank for SGLang"),
            ("model_name", "VARCHAR", "`model_name` label"),
            ("le", "DOUBLE", "histogram bucket bound"),
            ("reason", "VARCHAR", "`reason` label (waiting_by_reason, rejections)"),
            ("labels", "VARCHAR", "all labels as JSON"),
            ("value", "DOUBLE", "sample value"),
        ),
    ),
)

TABLES_BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}


def table(name: str) -> Table:
    """The declared table, or KeyError naming the known ones."""
    try:
        return TABLES_BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known: {sorted(TABLES_BY_NAME)}") from None
