"""Establish the key numbers of the incident from the store, each with its source.

Facts are read, never guessed silently: a derived value says how it was derived, and a
number the folder does not hold is simply absent (and named in missing_evidence).
Per-replica values become a tuple of facts scoped by replica when there are several.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from kvdiag.analyzer.model import Fact, SourceRef
from kvdiag.analyzer.store import StoreReader
from kvdiag.analyzer.timeseries import counter_increase

Facts = dict[str, Fact | tuple[Fact, ...]]
_CONFIG_FACTS: tuple[tuple[str, str, str, Callable[[str], Any]], ...] = (
    # fact name, config key, unit, converter
    ("pool_blocks", "num_gpu_blocks", "blocks", int),
    ("block_size", "block_size", "tokens", int),
    ("pool_bytes", "kv_cache_memory_bytes", "bytes", int),
    ("gpu_memory_utilization", "gpu_memory_utilization", "fraction", float),
    ("kv_cache_dtype", "cache_dtype", "", str),
    ("enable_prefix_caching", "enable_prefix_caching", "", lambda v: v == "True"),
    ("max_concurrency", "kv_cache_max_concurrency", "requests", float),
)


def _ref(row: dict[str, Any]) -> SourceRef:
    line = row.get("source_line")
    return SourceRef(str(row["source_path"]), int(line) if line is not None else None)


def _scoped(rows: list[tuple[str, Fact]]) -> Fact | tuple[Fact, ...]:
    """One fact when there is one replica, else one per replica scoped by name."""
    if len(rows) == 1:
        return rows[0][1]
    return tuple(
        Fact(f.value, f.unit, f.source, f.note, (("replica", replica),)) for replica, f in rows
    )


def _first_per_replica(frame: pl.DataFrame) -> list[dict[str, Any]]:
    if frame.is_empty():
        return []
    return frame.unique(subset=["replica"], keep="first", maintain_order=True).to_dicts()


def _config_facts(reader: StoreReader, facts: Facts) -> None:
    for name, key, unit, convert in _CONFIG_FACTS:
        rows = _first_per_replica(
            reader.sql(
                "SELECT * FROM config WHERE key = ? AND value NOT IN ('None', '') "
                "ORDER BY replica, source_path, source_line",
                [key],
            )
        )
        if rows:
            facts[name] = _scoped(
                [(r["replica"], Fact(convert(r["value"]), unit, _ref(r))) for r in rows]
            )


def _pool_facts(reader: StoreReader, facts: Facts) -> None:
    """Pool size in tokens: the log's pool line (minimum over ranks), else cache_config_info."""
    rows = reader.sql(
        "SELECT * FROM log_kv_pool WHERE tokens IS NOT NULL "
        "ORDER BY replica, tokens, source_path, source_line"
    )
    scoped = []
    for r in _first_per_replica(rows):
        note = (
            "smallest of the ranks' pool lines"
            if rows.filter(pl.col("replica") == r["replica"]).height > 1
            else None
        )
        scoped.append((r["replica"], Fact(int(r["tokens"]), "tokens", _ref(r), note)))
    if not scoped:
        cfg = _first_per_replica(
            reader.sql(
                "SELECT * FROM config WHERE key = 'kv_cache_size_tokens' "
                "AND value NOT IN ('None', '') "
                "ORDER BY replica, source_path, source_line"
            )
        )
        scoped = [(r["replica"], Fact(int(r["value"]), "tokens", _ref(r))) for r in cfg]
    if scoped:
        facts["pool_tokens"] = _scoped(scoped)
    mml = _first_per_replica(
        reader.sql(
            "SELECT * FROM log_kv_pool WHERE max_model_len IS NOT NULL "
            "ORDER BY replica, source_path, source_line"
        )
    )
    if mml:
        facts["max_model_len"] = _scoped(
            [(r["replica"], Fact(int(r["max_model_len"]), "tokens", _ref(r))) for r in mml]
        )


def _engine_facts(reader: StoreReader, facts: Facts) -> None:
    kinds = reader.sql("SELECT DISTINCT kind FROM inputs WHERE status = 'used'")["kind"].to_list()
    if any(k.startswith("vllm") for k in kinds) or reader.scalar(
        "SELECT count(*) FROM metric_samples WHERE name LIKE 'vllm:%'"
    ):
        facts["engine"] = Fact("vllm", None, None)


def _bytes_per_token(facts: Facts) -> None:
    """KV bytes per token from the pool's bytes and tokens, when both are known."""
    pool_bytes, tokens = facts.get("pool_bytes"), facts.get("pool_tokens")
    if isinstance(pool_bytes, Fact) and isinstance(tokens, Fact) and tokens.value:
        per_token = int(pool_bytes.value) // int(tokens.value)  # type: ignore[arg-type]
        facts["kv_bytes_per_token"] = Fact(
            per_token, "bytes", pool_bytes.source, "pool bytes / pool tokens"
        )


_LOAD_FACTS: tuple[tuple[str, str, str, str, float], ...] = (
    # fact, canonical metric, stats-line column, unit, stats-line scale to the metric's unit
    ("peak_kv_usage", "kv_cache_usage", "kv_usage_pct", "ratio", 0.01),
    ("max_requests_waiting", "num_requests_waiting", "waiting", "requests", 1.0),
    ("max_requests_running", "num_requests_running", "running", "requests", 1.0),
)


def _load_facts(reader: StoreReader, facts: Facts) -> None:
    """Peaks of the load gauges: from metrics when scraped, else from the stats lines."""
    for name, metric, column, unit, scale in _LOAD_FACTS:
        rows = reader.sql(
            "SELECT * FROM metric_samples WHERE metric = ? AND suffix = '' AND value = "
            "(SELECT max(value) FROM metric_samples WHERE metric = ? AND suffix = '') "
            "ORDER BY ts NULLS LAST, source_path, source_line LIMIT 1",
            [metric, metric],
        )
        value_col = "value"
        if rows.is_empty():
            rows = reader.sql(
                f"SELECT * FROM log_stats WHERE {column} = (SELECT max({column}) FROM log_stats) "
                "ORDER BY ts NULLS LAST, source_path, source_line LIMIT 1"
            )
            value_col = column
        if rows.height:
            r = rows.row(0, named=True)
            value = float(r[value_col]) * (scale if value_col == column else 1.0)
            facts[name] = Fact(round(value, 4) if unit == "ratio" else int(value), unit, _ref(r))


def _preemption_facts(reader: StoreReader, facts: Facts) -> None:
    """Preemptions during the window: the counter's increase, else the stats lines' sum."""
    series = reader.sql(
        "SELECT * FROM metric_samples WHERE metric = 'num_preemptions' AND suffix = 'total' "
        "ORDER BY replica, engine, ts NULLS FIRST, source_path, source_line"
    )
    if series.height:
        total = counter_increase(series)
        last = series.row(series.height - 1, named=True)
        facts["preemptions"] = Fact(
            int(total), "preemptions", _ref(last), "increase of vllm:num_preemptions_total"
        )
        return
    rows = reader.sql(
        "SELECT * FROM log_stats WHERE preemptions IS NOT NULL ORDER BY source_path, source_line"
    )
    if rows.height:
        last = rows.row(rows.height - 1, named=True)
        facts["preemptions"] = Fact(
            int(rows["preemptions"].sum()), "preemptions", _ref(last), "sum of stats lines"
        )


FINDERS: tuple[Callable[[StoreReader, Facts], None], ...] = (
    _engine_facts,
    _config_facts,
    _pool_facts,
    _load_facts,
    _preemption_facts,
)


def establish(reader: StoreReader) -> Facts:
    """All facts the store supports."""
    facts: Facts = {}
    for finder in FINDERS:
        finder(reader, facts)
    _bytes_per_token(facts)
    return facts
