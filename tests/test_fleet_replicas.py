"""The fleet view counts replicas before it reads their load: the count is the load
query's rows (never fewer: a replica whose samples are all NaN is counted, not loaded),
so skipping that query below two replicas loses no fleet."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from kvdiag.analyzer.store.database import Store
from kvdiag.rules.engine.fleet import _LOAD, _REPLICAS


def _rows(path: str, replicas: list[str | None], **columns: object) -> pl.DataFrame:
    rows = {"source_path": path, "source_line": list(range(1, len(replicas) + 1))}
    return pl.DataFrame(
        {**rows, "raw": "a line", "replica": replicas, **columns},
        schema_overrides={"replica": pl.String},
    )


def _metrics(replicas: list[str | None]) -> pl.DataFrame:
    usage = {"metric": "kv_cache_usage", "name": "vllm:kv_cache_usage_perc", "suffix": ""}
    return _rows("m.prom", replicas, **usage, ts=datetime(2026, 11, 30, 12), value=0.5)


def _stats(replicas: list[str | None]) -> pl.DataFrame:
    return _rows("vllm.log", replicas, kv_usage_pct=50.0, waiting=0)


@pytest.mark.parametrize(
    ("metrics", "stats", "rows"),
    [
        (["a", "a"], ["a"], 1),  # one replica, scraped and logged
        (["a"], [], 1),
        ([], ["a", "a"], 1),
        (["a"], ["b"], 2),
        (["a", "b", "c"], ["b"], 3),
        ([None], [None], 2),  # unnamed in both sources: _LOAD does not join them
        (["a"], [None], 2),
        ([None, None], [], 1),
    ],
)
def test_the_replica_count_is_the_load_querys_rows(
    metrics: list[str | None], stats: list[str | None], rows: int
) -> None:
    store = Store()
    try:
        if metrics:
            store.append("metric_samples", _metrics(metrics))
        if stats:
            store.append("log_stats", _stats(stats))
        reader = store.reader
        assert reader.sql(_LOAD).height == rows
        assert reader.scalar(_REPLICAS) == rows
    finally:
        store.finish()
