"""KV104: the GPUs of one tensor-parallel group hold very different amounts of memory."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from kvdiag.analyzer.model.quantities.ledger import fmt_gib
from kvdiag.analyzer.model.quantities.vocabulary import engine_process_words
from kvdiag.analyzer.model.quantities.workload import fmt_tokens
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold


class GpuImbalance(Rule):
    """Memory used differs across the GPUs of one tensor-parallel group.

    Per nvidia-smi snapshot, the GPUs that run this engine (its worker processes when the
    snapshot lists them, else every GPU in it): the fullest and the emptiest differ by at
    least `gap_gib` and by a factor of at least `ratio` (TP=2 with 72 GB vs 41 GB). Also
    per-rank pool lines (`Available KV cache memory`, `GPU KV cache size`) that differ by
    `rank_spread` or more. The group is limited by its fullest member: the engine clamps
    every rank's pool to the smallest.
    """

    code = "KV104"
    name = "pool.gpu_imbalance"
    layer = 1
    severity = Severity.WARNING
    implies = IncidentClass.GPU_IMBALANCE
    requires_any = ("gpu_snapshots", "log_kv_pool")
    thresholds = (
        Threshold("gap_gib", 4.0, "GiB", "used-memory difference between GPUs of the group"),
        Threshold("ratio", 1.2, "x", "fullest / emptiest used memory"),
        Threshold("rank_spread", 0.10, "ratio", "relative spread of per-rank pool sizes"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        found = list(self._snapshots(ctx)) + list(self._ranks(ctx))
        yield from found
        compared = any(isinstance(f, Comparison) for f in found)
        if compared and not any(isinstance(f, Finding) for f in found):
            yield ctx.rule_out("the GPUs of the group hold about the same memory")

    def _snapshots(self, ctx: RuleContext) -> Iterator[Finding | Comparison]:
        snaps = ctx.sql(
            "SELECT * FROM gpu_snapshots WHERE memory_used_mib IS NOT NULL "
            "ORDER BY replica, source_path, ts NULLS FIRST, gpu"
        )
        if snaps.is_empty():
            return
        serving = _serving_gpus(ctx)
        worst: tuple[float, list[dict[str, Any]]] | None = None
        for _, snap in snaps.group_by(["replica", "source_path", "ts"], maintain_order=True):
            rows = [r for r in snap.to_dicts() if not serving or r["gpu"] in serving]
            if len(rows) < 2:
                continue
            rows.sort(key=lambda r: r["memory_used_mib"])
            gap = (rows[-1]["memory_used_mib"] - rows[0]["memory_used_mib"]) / 1024
            if worst is None or gap > worst[0]:
                worst = (gap, rows)
        if worst is None:
            return
        gap, rows = worst
        low, high = rows[0], rows[-1]
        for r in rows:
            yield ctx.compare(
                f"memory used on GPU {r['gpu']}",
                round(low["memory_used_mib"] / 1024, 2),
                round(r["memory_used_mib"] / 1024, 2),
                "GiB",
                [ctx.evidence(r, "memory_used_mib", r["memory_used_mib"])],
                "expected: the emptiest GPU of the group (TP shards are symmetric)",
            )
        factor = high["memory_used_mib"] / max(low["memory_used_mib"], 1.0)
        if gap < ctx.threshold("gap_gib") or factor < ctx.threshold("ratio"):
            return
        tp = ctx.config("tensor_parallel_size")
        group = f"TP={tp['value']}" if tp is not None else f"{len(rows)} GPUs"
        title = (
            f"GPU {high['gpu']} holds {fmt_gib(high['memory_used_mib'] / 1024)} while GPU "
            f"{low['gpu']} holds {fmt_gib(low['memory_used_mib'] / 1024)} ({group}, "
            f"{factor:.2f}x): the group is limited by its fullest member"
        )
        if high["memory_free_mib"] is not None and low["memory_free_mib"] is not None:
            title += (
                f", with {fmt_gib(high['memory_free_mib'] / 1024)} free against "
                f"{fmt_gib(low['memory_free_mib'] / 1024)} on GPU {low['gpu']}"
            )
        ev = [ctx.evidence(r, "memory_used_mib", r["memory_used_mib"]) for r in (high, low)]
        yield ctx.finding(title, ev, _remedies(gap))

    def _ranks(self, ctx: RuleContext) -> Iterator[Finding | Comparison]:
        for col, unit in (("gib", "GiB"), ("tokens", "tokens")):
            rows = ctx.sql(
                f"SELECT * FROM log_kv_pool WHERE {col} IS NOT NULL AND rank IS NOT NULL "
                f"ORDER BY replica, {col}, source_line"
            )
            for _, part in rows.group_by("replica", maintain_order=True):
                if part["rank"].n_unique() < 2:
                    continue
                low, high = part.row(0, named=True), part.row(part.height - 1, named=True)
                spread = (high[col] - low[col]) / high[col] if high[col] else 0.0
                yield ctx.compare(
                    f"smallest vs largest per-rank KV pool [{low['replica']}]",
                    high[col],
                    low[col],
                    unit,
                    [ctx.evidence(r, f"pool_{col}", r[col]) for r in (low, high)],
                    "expected: the largest rank (ranks of one group are symmetric)",
                )
                if spread < ctx.threshold("rank_spread"):
                    continue
                shown = fmt_gib(low[col]) if unit == "GiB" else fmt_tokens(low[col])
                top = fmt_gib(high[col]) if unit == "GiB" else fmt_tokens(high[col])
                yield ctx.finding(
                    f"Per-rank KV pools differ by {spread:.0%}: rank {low['rank']} has {shown}, "
                    f"rank {high['rank']} {top}; every rank is clamped to the smallest",
                    [ctx.evidence(r, f"pool_{col}", r[col]) for r in (low, high)],
                    _remedies(None),
                )


def _serving_gpus(ctx: RuleContext) -> set[int]:
    procs = ctx.sql("SELECT gpu, process_name FROM gpu_processes WHERE gpu IS NOT NULL")
    if procs.is_empty():
        return set()
    ours = procs.filter(
        pl.any_horizontal(
            [
                pl.col("process_name").str.to_lowercase().str.contains(k, literal=True)
                for k in engine_process_words()
            ]
        )
    )
    return set(ours["gpu"].to_list())


def _remedies(gap: float | None) -> list[Remedy]:
    lost = f"; balanced, the group gains up to {fmt_gib(gap)} per GPU" if gap else ""
    return [
        Remedy(
            "check the parallel split configuration, the attention backend and the engine version",
            "TP shards weights and KV symmetrically: a lopsided GPU means something else is "
            f"placed on it (a stray process, an unsharded buffer){lost}",
        ),
        Remedy(
            "look per GPU, not at the aggregate KV usage",
            "one card can be full while its peer is half empty",
        ),
    ]
