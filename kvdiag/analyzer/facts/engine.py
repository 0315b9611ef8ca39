"""Engine identity facts: which engine, and which device its KV pool lives on."""

from __future__ import annotations

from kvdiag.analyzer.facts.base import Facts, ref
from kvdiag.analyzer.model import Fact
from kvdiag.analyzer.store import StoreReader


def engine_facts(reader: StoreReader, facts: Facts) -> None:
    kinds = reader.sql("SELECT DISTINCT kind FROM inputs WHERE status = 'used'")["kind"].to_list()
    if any(k.startswith("vllm") for k in kinds) or reader.scalar(
        "SELECT count(*) FROM metric_samples WHERE name LIKE 'vllm:%'"
    ):
        facts["engine"] = Fact("vllm", None, None)


_DEVICE_SOURCES = (
    # table, column, how it names the device
    ("log_kv_pool", "device"),
    ("log_stats", "kv_device"),
    ("log_engine", "device"),
)


def device_facts(reader: StoreReader, facts: Facts) -> None:
    """The KV pool's device as the log names it (CPU runs: layer 1 compares with node memory)."""
    for table, column in _DEVICE_SOURCES:
        rows = reader.sql(
            f"SELECT *, upper({column}) AS _dev FROM {table} WHERE {column} IS NOT NULL "
            "ORDER BY source_path, source_line LIMIT 1"
        )
        if rows.height:
            row = rows.row(0, named=True)
            device = "GPU" if row["_dev"] == "CUDA" else str(row["_dev"])
            facts["kv_device"] = Fact(device, None, ref(row), f"from {table}.{column}")
            return
