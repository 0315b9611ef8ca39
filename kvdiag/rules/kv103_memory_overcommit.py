"""KV103: out of memory outside the KV pool, or a budget that leaves no room for workspace."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from kvdiag.analyzer.diagnosis import Comparison, Finding, IncidentClass, Remedy, RuledOut, Severity
from kvdiag.domain.units import GIB
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.card import card
from kvdiag.rules.support.ledger import fmt_gib
from kvdiag.rules.support.load_picture import load_points
from kvdiag.rules.support.queries import col_max
from kvdiag.rules.support.vocabulary import vocabulary
from kvdiag.rules.support.workload import pct


class MemoryOvercommit(Rule):
    """CUDA out-of-memory while the KV pool is not full, or a budget with no workspace left.

    Three shapes: a CUDA OOM (any torch wording) while KV usage stayed under `usage_full`
    (the pool never ran out; the workspace, graphs or buffers did); a start-up refusal
    because free memory was below total x gpu_memory_utilization (another process holds the
    card); or a stated gpu_memory_utilization that leaves under `workspace_min_gib` outside
    the budget. Remedies price the utilization that leaves room (`target_util`; 0.85-0.88 is
    the usual fix).
    """

    code = "KV103"
    name = "pool.memory_overcommit"
    layer = 1
    severity = Severity.ERROR
    implies = IncidentClass.MEMORY_OVERCOMMIT
    requires_any = ("log_oom", "log_capacity_errors", "log_memory", "config")
    thresholds = (
        Threshold(
            "usage_full", 0.99, "ratio", "an OOM with KV usage under this is outside the pool"
        ),
        Threshold(
            "workspace_min_gib", 2.0, "GiB", "memory gpu_memory_utilization must leave outside"
        ),
        Threshold("target_util", 0.88, "ratio", "the utilization remedies propose (or lower)"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        oom = ctx.sql("SELECT * FROM log_oom ORDER BY ts NULLS LAST, source_path, source_line")
        if oom.height:
            yield from self._oom(ctx, oom)
            return
        refused = ctx.sql(
            "SELECT * FROM log_capacity_errors WHERE event = 'free_below_desired' "
            "OR lower(coalesce(message, raw)) LIKE '%less than desired gpu memory utilization%' "
            "ORDER BY ts NULLS LAST, source_path, source_line"
        )
        if refused.height:
            yield self._refused(ctx, refused.row(0, named=True))
            return
        yield from self._margin(ctx)

    def _oom(self, ctx: RuleContext, oom: pl.DataFrame) -> Iterator[Finding | RuledOut]:
        row = oom.row(0, named=True)
        points = load_points(ctx)
        peak = col_max(points, "usage") if points.height else None
        if peak is not None and peak >= ctx.threshold("usage_full"):
            yield ctx.rule_out(f"the OOM came with a full KV pool ({pct(peak)}): see saturation")
            return
        parts = [f"CUDA out of memory ({oom.height} errors)"]
        if row["tried_bytes"]:
            parts.append(f"tried to allocate {fmt_gib(row['tried_bytes'] / GIB)}")
        if row["free_bytes"] is not None and row["total_bytes"]:
            parts.append(
                f"{fmt_gib(row['free_bytes'] / GIB)} free of {fmt_gib(row['total_bytes'] / GIB)}"
            )
        if row["process_bytes"]:
            parts.append(f"this process held {fmt_gib(row['process_bytes'] / GIB)}")
        usage = (
            f"while KV usage peaked at {pct(peak)}: the pool was not full"
            if peak is not None
            else "outside the KV pool (no usage series to place it)"
        )
        title = ", ".join(parts) + f" {usage}"
        ev = [ctx.evidence(r, "cuda_oom", r["tried_bytes"]) for r in oom.head(3).to_dicts()]
        yield ctx.finding(title, ev, self._remedies(ctx, row.get("tried_bytes")))

    def _refused(self, ctx: RuleContext, row: dict[str, Any]) -> Finding:
        free, total, util = row["free_gib"], row["total_gib"], row["utilization"]
        words = vocabulary(ctx, row["replica"])
        title = "The engine refused to start: free memory on the device is below the requested "
        title += words.name("gpu_memory_utilization")
        if free is not None and total:
            title += f" ({fmt_gib(free)} free of {fmt_gib(total)}"
            title += f", {util:g} requested)" if util is not None else ")"
        remedies = []
        if free is not None and total:
            fits = int(100 * free / total) / 100 - 0.01
            remedies.append(
                Remedy(
                    words.flag("gpu_memory_utilization", f"{fits:.2f}"),
                    f"{fmt_gib(free)} of {fmt_gib(total)} was free at start; another process "
                    f"holds {fmt_gib(total - free)}",
                )
            )
        remedies.append(
            Remedy("free the card first", "stop the process holding memory, then start")
        )
        return ctx.finding(title, [ctx.evidence(row, "free_gib", free)], remedies)

    def _margin(self, ctx: RuleContext) -> Iterator[Finding | Comparison | RuledOut]:
        c = card(ctx, None)
        if c.utilization is None or c.total_gib is None or c.device == "CPU":
            yield ctx.rule_out("no CUDA OOM and no start-up refusal in the logs")
            return
        outside = c.total_gib * (1 - c.utilization)
        fraction = vocabulary(ctx).name("gpu_memory_utilization")
        yield ctx.compare(
            f"memory outside {fraction}",
            ctx.threshold("workspace_min_gib"),
            round(outside, 2),
            "GiB",
            c.evidence,
            f"{fmt_gib(c.total_gib)} x (1 - {c.utilization:g}); expected: the minimum workspace",
        )
        if not c.utilization_stated or outside >= ctx.threshold("workspace_min_gib"):
            yield ctx.rule_out(
                f"no OOM, no start-up refusal; {fraction} {c.utilization:g} leaves "
                f"{fmt_gib(outside)} outside the budget"
            )
            return
        yield ctx.finding(
            f"{fraction} {c.utilization:g} leaves {fmt_gib(outside)} of a "
            f"{fmt_gib(c.total_gib)} card for workspace, graphs and communication buffers",
            c.evidence,
            self._remedies(ctx, None),
            severity=Severity.WARNING,
        )

    def _remedies(self, ctx: RuleContext, tried: int | None) -> list[Remedy]:
        c = card(ctx, None)
        words = vocabulary(ctx)
        target = ctx.threshold("target_util")
        if c.utilization is None or c.total_gib is None or c.utilization <= target:
            fraction, budget = (
                words.name("gpu_memory_utilization"),
                words.name("max_num_batched_tokens"),
            )
            return [
                Remedy(
                    f"lower {fraction} (0.85-0.88) or {budget}",
                    "leave room for workspace, CUDA graphs and communication buffers",
                )
            ]
        freed = (c.utilization - target) * c.total_gib
        need = f"; the failed allocation was {fmt_gib(tried / GIB)}" if tried else ""
        return [
            Remedy(
                words.flag("gpu_memory_utilization", f"{c.utilization:g} -> {target:g}"),
                f"leaves {fmt_gib(freed)} more for workspace outside the budget{need}; the pool "
                f"shrinks by the same {fmt_gib(freed)}",
            )
        ]
