"""Per-GPU memory facts from nvidia-smi: total, used and free, scoped by GPU (and replica).

With several snapshots the one where the GPU held the most memory is reported (the least
free: what layer 1 must plan with), and the note says of how many. The default table
prints no free memory; free is then total - used (NVML v2 counts reserved memory in used).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain.records.diagnosis import Fact


def _peaks(reader: StoreReader) -> pl.DataFrame:
    """One row per (replica, gpu): its snapshot with the most memory used, and the count."""
    return reader.sql(
        "SELECT *, count(*) OVER w AS n_snapshots, "
        "row_number() OVER (w ORDER BY memory_used_mib DESC NULLS LAST, ts NULLS LAST, "
        "source_path, source_line) AS pick "
        "FROM gpu_snapshots WHERE gpu IS NOT NULL "
        "WINDOW w AS (PARTITION BY replica, gpu) "
        "QUALIFY pick = 1 ORDER BY replica, gpu"
    )


def _scope(row: dict[str, Any], several_replicas: bool) -> tuple[tuple[str, str], ...]:
    gpu = (("gpu", str(row["gpu"])),)
    return (("replica", str(row["replica"])), *gpu) if several_replicas else gpu


def gpu_memory_facts(reader: StoreReader, facts: Facts) -> None:
    """gpu_memory_total / _used / _free (MiB), one fact per GPU."""
    if not reader.has_rows("gpu_snapshots"):
        return
    peaks = _peaks(reader)
    if peaks.is_empty():
        return
    several = peaks["replica"].n_unique() > 1
    out: dict[str, list[Fact]] = {"gpu_memory_total": [], "gpu_memory_used": []}
    out["gpu_memory_free"] = []
    for row in peaks.to_dicts():
        scope = _scope(row, several)
        note = f"most used of {row['n_snapshots']} snapshots" if row["n_snapshots"] > 1 else None
        total, used, free = row["memory_total_mib"], row["memory_used_mib"], row["memory_free_mib"]
        src = ref(row)
        if total is not None:
            out["gpu_memory_total"].append(Fact(total, "MiB", src, note, scope))
        if used is not None:
            out["gpu_memory_used"].append(Fact(used, "MiB", src, note, scope))
        if free is None and total is not None and used is not None:
            free_note = "total - used (the source prints no free memory)"
            out["gpu_memory_free"].append(Fact(total - used, "MiB", src, free_note, scope))
        elif free is not None:
            out["gpu_memory_free"].append(Fact(free, "MiB", src, note, scope))
    for name, found in out.items():
        if found:
            facts[name] = found[0] if len(found) == 1 else tuple(found)
