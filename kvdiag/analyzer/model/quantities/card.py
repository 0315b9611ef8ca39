"""What layer 1 knows about the card (or the CPU node) and the pool carved from it.

Gathered from the start-up memory lines (log_memory), the pool lines (log_kv_pool), the
config table, nvidia-smi snapshots (gpu_snapshots, gpu_processes) and the model's shape.
Each number keeps the evidence it came from; anything the inputs do not state stays None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kvdiag.analyzer.model.first_stated import first_ids, firsts_of
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.ledger import Ledger
from kvdiag.analyzer.model.quantities.vocabulary import engine_process_words
from kvdiag.analyzer.model.queries import of_replica
from kvdiag.domain import kvmath
from kvdiag.domain.records.diagnosis import Evidence, Fact
from kvdiag.domain.units import GIB

_MEMORY_COLS = (
    "total_gib",
    "utilization",
    "weights_gib",
    "activation_gib",
    "non_torch_gib",
    "cuda_graph_gib",
    "kv_gib",
    "free_gib",
)

# Of the start-up lines, each replica's first statement of each ledger term (rank 0 first)
# and its smallest pool line, read as such: a crash loop prints them at each of its starts.
_MEMORY_ORDER = "coalesce(rank, 0), ts NULLS LAST, source_line"
_FIRST_MEMORY_LINES = firsts_of(
    "log_memory",
    [
        first_ids(
            "log_memory",
            "replica",
            f"{c} IS NOT NULL",
            "coalesce(rank, 0), ts IS NULL, coalesce(ts, TIMESTAMP '1970-01-01'), "
            "coalesce(source_line, 0)",
        )
        for c in _MEMORY_COLS
    ],
    order=_MEMORY_ORDER,
)
_SMALLEST_POOL_LINE = firsts_of(
    "log_kv_pool",
    [first_ids("log_kv_pool", "replica", "gib IS NOT NULL", "gib, coalesce(source_line, 0)")],
    "gib IS NOT NULL",
    order="gib, source_line",
)


@dataclass
class Gpu:
    """One GPU in the latest nvidia-smi snapshot."""

    index: int
    total_gib: float
    used_gib: float
    free_gib: float
    evidence: Evidence


@dataclass
class Card:
    replica: str
    device: str  # "GPU" | "CPU"
    total_gib: float | None = None
    utilization: float | None = None
    utilization_stated: bool = False  # False: a version default from the config table
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = None
    pool_gib: float | None = None
    pool_how: str = ""
    explicit: bool = False  # the pool size was set by the operator, not carved by utilization
    start_used_gib: float | None = None  # in use on the device before the engine started
    gpus: list[Gpu] = field(default_factory=list)
    others: list[tuple[str, float, Evidence]] = field(default_factory=list)  # co-tenants
    evidence: list[Evidence] = field(default_factory=list)

    def ledger(self) -> Ledger | None:
        if self.total_gib is None or self.utilization is None or self.pool_gib is None:
            return None
        return Ledger(
            self.total_gib,
            self.utilization,
            self.pool_gib,
            self.weights_gib,
            self.activation_gib,
            self.non_torch_gib,
            self.cuda_graph_gib,
        )


def card(ctx: Incident, replica: str | None) -> Card:
    """Everything layer 1 can say about one replica's card."""
    c = Card(replica or "", "CPU" if _on_cpu(ctx, replica) else "GPU")
    _memory_lines(ctx, replica, c)
    _pool(ctx, replica, c)
    _config(ctx, replica, c)
    _snapshots(ctx, replica, c)
    if c.total_gib is None and c.gpus:
        c.total_gib = min(g.total_gib for g in c.gpus)
    return c


def _on_cpu(ctx: Incident, replica: str | None) -> bool:
    # The replicas only: a crash loop prints a CPU pool line at each of its starts, and a
    # CPU run names its device on every stats line (millions of rows, memoised).
    return bool(
        of_replica(
            ctx, "SELECT DISTINCT replica FROM log_kv_pool WHERE upper(device) = 'CPU'", replica
        ).height
        or of_replica(
            ctx, "SELECT DISTINCT replica FROM log_stats WHERE upper(kv_device) = 'CPU'", replica
        ).height
    )


def _memory_lines(ctx: Incident, replica: str | None, c: Card) -> None:
    """First stated value of each ledger term (rank 0 first: one GPU's ledger)."""
    rows = of_replica(ctx, _FIRST_MEMORY_LINES, replica)
    for col in _MEMORY_COLS:
        hit = rows.filter(pl.col(col).is_not_null()) if rows.height else rows
        if hit.is_empty():
            continue
        row = hit.row(0, named=True)
        value = float(row[col])
        if col == "kv_gib":
            c.pool_gib, c.pool_how = value, "start-up memory profile"
        elif col == "free_gib":
            if row["total_gib"] is not None:
                c.start_used_gib = float(row["total_gib"]) - value
        elif col == "utilization":
            c.utilization, c.utilization_stated = value, True
        else:
            setattr(c, col, value)
        c.evidence.append(ctx.evidence(row, col, value))


def _pool(ctx: Incident, replica: str | None, c: Card) -> None:
    explicit = ctx.config("kv_cache_memory_bytes", replica)
    if explicit is not None and explicit["origin"] != "default":
        # The operator's byte count is exact; the log prints it rounded to 0.01 GiB.
        c.explicit = True
        if c.pool_gib is None:
            c.pool_gib, c.pool_how = float(explicit["value"]) / GIB, "kv_cache_memory_bytes"
        c.evidence.append(ctx.evidence(explicit, "kv_cache_memory_bytes", explicit["value"]))
    rows = of_replica(ctx, _SMALLEST_POOL_LINE, replica)
    if rows.height:
        row = rows.row(0, named=True)  # the group is clamped to its smallest rank
        if row["total_gib"] is not None:  # "Explicitly set (a/b) GiB for KV cache on node N"
            c.explicit, c.total_gib = True, c.total_gib or float(row["total_gib"])
        if c.pool_gib is None:
            c.pool_gib, c.pool_how = float(row["gib"]), "pool line (smallest rank)"
        c.evidence.append(ctx.evidence(row, "pool_gib", row["gib"]))
    if c.pool_gib is None:
        _pool_from_tokens(ctx, replica, c)


def _pool_from_tokens(ctx: Incident, replica: str | None, c: Card) -> None:
    """The pool in tokens times the kv_bytes_per_token fact (facts/kv.py, from config.json).

    The fact every other rule reads: one KV dtype, TP split and layer count, so layer 1's
    pool and the other layers' cannot disagree.
    """
    tokens, per_token = ctx.fact("pool_tokens", replica), ctx.fact("kv_bytes_per_token", replica)
    if tokens is None or per_token is None:
        return
    if not isinstance(tokens.value, int | float) or not isinstance(per_token.value, int):
        return
    c.pool_gib = kvmath.pool_bytes_for_tokens(float(tokens.value), per_token.value) / GIB
    c.pool_how = (
        f"{int(tokens.value):,} tokens x {per_token.value:,} bytes per token ({_origin(per_token)})"
    )


def _origin(fact: Fact) -> str:
    note = str(fact.note or "")
    return "config.json" if note.startswith("computed from config.json") else note


def _config(ctx: Incident, replica: str | None, c: Card) -> None:
    if c.utilization is not None:
        return
    row = ctx.config("gpu_memory_utilization", replica)
    if row is not None:
        c.utilization = float(row["value"])
        c.utilization_stated = row["origin"] != "default"
        c.evidence.append(ctx.evidence(row, "gpu_memory_utilization", row["value"]))


def _snapshots(ctx: Incident, replica: str | None, c: Card) -> None:
    """The latest snapshot's GPUs, and processes on them not identified as this engine."""
    snaps = of_replica(
        ctx,
        "SELECT * FROM gpu_snapshots ORDER BY ts DESC NULLS LAST, source_path DESC, gpu",
        replica,
    )
    if snaps.is_empty():
        return
    first = snaps.row(0, named=True)
    latest = snaps.filter(
        (pl.col("source_path") == first["source_path"]) & (pl.col("ts").eq_missing(first["ts"]))
    )
    for r in latest.to_dicts():
        if r["memory_total_mib"] is None or r["memory_used_mib"] is None:
            continue
        total, used = float(r["memory_total_mib"]) / 1024, float(r["memory_used_mib"]) / 1024
        free = (
            float(r["memory_free_mib"]) / 1024 if r["memory_free_mib"] is not None else total - used
        )
        c.gpus.append(
            Gpu(
                int(r["gpu"] or 0),
                total,
                used,
                free,
                ctx.evidence(r, "memory_free_mib", round(free * 1024)),
            )
        )
    by_use = "SELECT * FROM gpu_processes ORDER BY used_mib DESC NULLS LAST"
    procs = of_replica(ctx, by_use, replica)
    pids = of_replica(ctx, "SELECT DISTINCT pid FROM log_engine WHERE pid IS NOT NULL", None)
    log_pids = set(pids["pid"].to_list())

    def ours(r: dict[str, Any]) -> bool:
        name = str(r["process_name"] or "").lower()
        return any(k in name for k in engine_process_words()) or r["pid"] in log_pids

    rows = procs.to_dicts()
    # Only when the engine's own processes are recognisable can the rest be called co-tenants
    # (a v0 engine shows up as a bare "python3").
    if not any(ours(r) for r in rows):
        return
    for r in rows:
        if not ours(r) and r["used_mib"]:
            label = f"pid {r['pid']} {r['process_name'] or '?'}"
            ev = ctx.evidence(r, "process_used_mib", r["used_mib"])
            c.others.append((label, float(r["used_mib"]) / 1024, ev))
