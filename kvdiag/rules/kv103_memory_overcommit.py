"""KV103: out of memory outside the KV pool, or a budget that leaves no room for workspace."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from kvdiag.analyzer.model.quantities.card import card
from kvdiag.analyzer.model.quantities.ledger import fmt_gib
from kvdiag.analyzer.model.quantities.load_picture import load_points
from kvdiag.analyzer.model.quantities.refusals import (
    MEMORY_REFUSALS,
    advised_changes,
    first_sentence,
    named_settings,
)
from kvdiag.analyzer.model.quantities.vocabulary import vocabulary
from kvdiag.analyzer.model.quantities.workload import pct
from kvdiag.analyzer.model.queries import col_max
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.domain.units import GIB
from kvdiag.rules.base import Rule, RuleContext, Threshold


class MemoryOvercommit(Rule):
    """CUDA out-of-memory while the KV pool is not full, or a budget with no workspace left.

    Three shapes: a CUDA OOM (any torch wording) while KV usage stayed under `usage_full`
    (the pool never ran out; the workspace, graphs or buffers did); a start-up refusal
    because the memory the engine was told to take is not there (free device or NUMA-node
    memory below total x gpu_memory_utilization, less than the KV cache asked for, weights
    held by another process, an OOM while warming up, a model too large for the device) or
    a buffer outside the KV pool ran out (SGLang's request slots); or a stated
    gpu_memory_utilization that leaves under `workspace_min_gib` outside the budget. Remedies
    price the utilization that leaves room (`target_util`; 0.85-0.88 is the usual fix).
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
            "SELECT * FROM log_capacity_errors WHERE event IN ("
            + ", ".join("?" for _ in MEMORY_REFUSALS)
            + ") OR lower(coalesce(message, raw)) LIKE "
            "'%less than desired gpu memory utilization%' "
            "ORDER BY ts NULLS LAST, source_path, source_line",
            list(MEMORY_REFUSALS),
        )
        if refused.height:
            row = refused.row(0, named=True)
            if row["event"] == "sglang_req_slots_exhausted":
                yield _slots_exhausted(ctx, row)
            elif row["event"] in ("free_below_desired", "kv_memory_short"):
                yield self._refused(ctx, row)
            else:
                yield _memory_refusal(ctx, row)
            return
        yield from self._margin(ctx)

    def _oom(self, ctx: RuleContext, oom: pl.DataFrame) -> Iterator[Finding | RuledOut]:
        row = oom.row(0, named=True)
        points = load_points(ctx)
        peak = col_max(points, "usage") if points.height else None
        if peak is not None and peak >= ctx.threshold("usage_full"):
            yield ctx.rule_out(f"the OOM came with a full KV pool ({pct(peak)}): see saturation")
            return
        # torch's text as a ROCm build prints it says HIP: the title keeps the engine's word.
        device = "HIP" if "HIP out of memory" in (row.get("raw") or "") else "CUDA"
        parts = [f"{device} out of memory ({oom.height} errors)"]
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
        free, total = row["free_gib"], row["total_gib"]
        words = vocabulary(ctx, row["replica"])
        remedies = []
        if row["event"] == "kv_memory_short" and free is not None:
            settings = ", ".join(named_settings(row)) or "VLLM_CPU_KVCACHE_SPACE"
            remedies.append(
                Remedy(
                    f"a KV cache below {fmt_gib(free)} ({settings})",
                    f"{fmt_gib(row['requested_gib'] or 0)} was asked for and {fmt_gib(free)} "
                    "was free",
                )
            )
        elif free is not None and total:
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
        title = _refusal_title(row, words.name("gpu_memory_utilization"))
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
            threshold=True,
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


def _refusal_title(row: dict[str, Any], fraction: str) -> str:
    """Free memory below what the engine was told to take, with the figures it printed."""
    free, total, util = row["free_gib"], row["total_gib"], row["utilization"]
    # The CPU backend's wording names a NUMA node, not a device.
    place = "the NUMA node" if "on node " in str(row["message"] or row["raw"]) else "the device"
    if row["event"] == "kv_memory_short":
        title = f"The engine refused to start: {place} has less free memory than the KV cache "
        title += "asked for"
        if free is not None and total:
            title += f" ({fmt_gib(free)} free of {fmt_gib(total)}"
            title += f", {fmt_gib(row['requested_gib'])} asked)" if row["requested_gib"] else ")"
        return title
    title = f"The engine refused to start: free memory on {place} is below the requested {fraction}"
    if free is not None and total:
        title += f" ({fmt_gib(free)} free of {fmt_gib(total)}"
        title += f", {util:g} requested)" if util is not None else ")"
    return title


def _memory_refusal(ctx: RuleContext, row: dict[str, Any]) -> Finding:
    """A start-up refusal for device memory, in the engine's words and numbers."""
    said = first_sentence(row)
    numbers = []
    if row["requested_slots"] is not None:
        numbers.append(f"{row['requested_slots']} dummy requests")
    if row["requested_gib"] is not None and row["total_gib"]:
        budget = f"{fmt_gib(row['requested_gib'])} budget of {fmt_gib(row['total_gib'])}"
        numbers.append(budget + (f" ({row['utilization']:g})" if row["utilization"] else ""))
    stated = f" ({'; '.join(numbers)})" if numbers else ""
    title = f"The engine ran out of device memory while starting{stated}: {said}"
    settings = advised_changes(row)
    remedies = [Remedy(", ".join(settings), f"the engine's own advice: {said}")]
    if not settings:
        remedies = [Remedy("a smaller model, more devices (sharding) or quantized weights", said)]
    return ctx.finding(title, [ctx.evidence(row, "capacity_error", row["event"])], remedies)


def _slots_exhausted(ctx: RuleContext, row: dict[str, Any]) -> Finding:
    """SGLang's request-slot pool (outside the KV pool, sized by the running-request cap)
    had fewer free slots than the batch asked for; the engine stops and asks for a smaller
    --max-running-requests."""
    words = vocabulary(ctx, row["replica"])
    free, asked = row["available_slots"], row["requested_slots"]
    counts = f": {free} free, {asked} asked for" if free is not None and asked is not None else ""
    title = (
        f"The request-slot pool ran out{counts}: more requests were admitted than it has "
        f"slots (it sits outside the KV pool and is sized by {words.name('max_num_seqs')})"
    )
    cap = ctx.config("max_num_seqs", row["replica"])
    flag = words.flag("max_num_seqs")
    target = ""
    if cap is not None and free is not None and asked is not None:
        lower = int(float(cap["value"])) - (int(asked) - int(free))
        target = f" {lower}" if lower > 0 else ""
    remedy = Remedy(
        f"a smaller {flag}{target}",
        "the engine's own advice: the running-request cap must not exceed the request slots",
    )
    return ctx.finding(title, [ctx.evidence(row, "available_slots", free)], [remedy])
