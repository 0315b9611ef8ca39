"""KV301: requests wait or are preempted because the KV pool is full."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl

from kvdiag.analyzer.model import Evidence, Finding, IncidentClass, Remedy, Severity
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.queries import counter, counter_increase, first_max, gauge, histogram_mean


@dataclass
class _Signals:
    """What the metrics and the log say about one incident, merged."""

    peak_usage: float | None = None
    full_and_waiting: int = 0  # time points with usage >= full and waiting >= min
    max_waiting: int = 0
    max_running: int = 0
    preemptions: float = 0.0
    evidence: list[Evidence] | None = None


class KvSaturation(Rule):
    """Requests wait or are preempted while the KV pool is full (genuine exhaustion).

    Evidence: KV usage at or above `usage_full` at the same time as waiting requests
    (metrics scrapes or the engine's stats lines), and preemptions counted by
    `vllm:num_preemptions_total` or the stats line. Either full-and-waiting moments, or
    preemptions with a pool that reached `usage_full`, fire the rule.
    """

    code = "KV301"
    name = "peak.kv_saturation"
    layer = 3
    severity = Severity.ERROR
    implies = IncidentClass.SATURATION
    requires_any = ("metric_samples", "log_stats")
    thresholds = (
        Threshold("usage_full", 0.90, "ratio", "KV usage at or above this counts as a full pool"),
        Threshold("min_waiting", 1, "requests", "waiting requests that count as a queue"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        sig = _Signals(evidence=[])
        self._from_metrics(ctx, sig)
        self._from_log(ctx, sig)
        full = ctx.threshold("usage_full")
        fired = sig.full_and_waiting > 0 or (sig.preemptions > 0 and (sig.peak_usage or 0) >= full)
        if not fired or sig.peak_usage is None:
            return
        title = (
            f"KV pool full while requests waited: usage peaked at {sig.peak_usage:.0%}, "
            f"up to {sig.max_waiting} waiting, {int(sig.preemptions)} preemptions"
        )
        yield ctx.finding(title, sig.evidence or [], _remedies(ctx, sig))

    def _from_metrics(self, ctx: RuleContext, sig: _Signals) -> None:
        usage = gauge(ctx, "kv_cache_usage")
        if usage.is_empty():
            return
        waiting = gauge(ctx, "num_requests_waiting")
        running = gauge(ctx, "num_requests_running")
        preempt = counter(ctx, "num_preemptions")
        assert sig.evidence is not None
        sig.peak_usage = max(sig.peak_usage or 0.0, float(usage["value"].max()))  # type: ignore[arg-type]
        sig.preemptions = max(sig.preemptions, counter_increase(preempt))
        if not waiting.is_empty():
            sig.max_waiting = max(sig.max_waiting, int(waiting["value"].max()))  # type: ignore[arg-type]
        if not running.is_empty():
            sig.max_running = max(sig.max_running, int(running["value"].max()))  # type: ignore[arg-type]
        joint = usage.join(waiting, on=["replica", "engine", "ts"], suffix="_w")
        hot = joint.filter(
            (pl.col("value") >= ctx.threshold("usage_full"))
            & (pl.col("value_w") >= ctx.threshold("min_waiting"))
        )
        sig.full_and_waiting += hot.height
        if (row := first_max(usage, "value")) is not None:
            sig.evidence.append(ctx.evidence(row, "kv_cache_usage", row["value"]))
        if (row := first_max(hot.rename({"value": "usage"}), "value_w")) is not None:
            sig.evidence.append(_waiting_evidence(ctx, row))
        if (row := first_max(preempt, "value")) is not None and sig.preemptions > 0:
            sig.evidence.append(ctx.evidence(row, "num_preemptions_total", row["value"]))

    def _from_log(self, ctx: RuleContext, sig: _Signals) -> None:
        stats = ctx.sql(
            "SELECT * FROM log_stats WHERE kv_usage_pct IS NOT NULL "
            "ORDER BY ts, source_path, source_line"
        )
        if stats.is_empty():
            return
        assert sig.evidence is not None
        peak = float(stats["kv_usage_pct"].max()) / 100  # type: ignore[arg-type]
        sig.peak_usage = max(sig.peak_usage or 0.0, peak)
        sig.max_waiting = max(sig.max_waiting, int(stats["waiting"].max() or 0))  # type: ignore[arg-type]
        sig.max_running = max(sig.max_running, int(stats["running"].max() or 0))  # type: ignore[arg-type]
        if stats["preemptions"].drop_nulls().len():
            sig.preemptions = max(sig.preemptions, float(stats["preemptions"].sum()))
        hot = stats.filter(
            (pl.col("kv_usage_pct") >= 100 * ctx.threshold("usage_full"))
            & (pl.col("waiting") >= ctx.threshold("min_waiting"))
        )
        sig.full_and_waiting += hot.height
        for row in (hot.row(0, named=True) if hot.height else None, first_max(hot, "waiting")):
            if row is not None:
                sig.evidence.append(
                    ctx.evidence(
                        row,
                        "kv_usage_pct_with_waiting",
                        f"{row['kv_usage_pct']}% / {row['waiting']} waiting",
                    )
                )


def _waiting_evidence(ctx: RuleContext, row: dict[str, Any]) -> Evidence:
    # The joined row carries the waiting sample's provenance under the _w suffix.
    src = {
        "source_path": row["source_path_w"],
        "source_line": row["source_line_w"],
        "raw": row["raw_w"],
        "ts": row["ts"],
    }
    return ctx.evidence(src, "num_requests_waiting", row["value_w"])


def _remedies(ctx: RuleContext, sig: _Signals) -> list[Remedy]:
    pool = ctx.fact_value("pool_tokens")
    prompt = histogram_mean(ctx, "request_prompt_tokens")
    gen = histogram_mean(ctx, "request_generation_tokens")
    out: list[Remedy] = []
    if pool and prompt and gen:
        per_request = prompt[0] + gen[0]
        fit = max(1, int(pool // per_request))
        out.append(
            Remedy(
                f"--max-num-seqs {fit}",
                f"the pool holds {pool:,} tokens; requests average {prompt[0]:,.0f} prompt + "
                f"{gen[0]:,.0f} generated = {per_request:,.0f} tokens, so {fit} fit without "
                f"preemption (up to {sig.max_running} ran at once)",
            )
        )
        demand = (sig.max_running + sig.max_waiting) * per_request
        out.append(
            Remedy(
                "add replicas (data parallel) or shed load at the peak",
                f"peak demand {sig.max_running + sig.max_waiting} requests x {per_request:,.0f} "
                f"tokens = {demand:,.0f} tokens, {demand / pool:.1f}x the pool",
            )
        )
    if pool:
        out.append(
            Remedy(
                "--kv-cache-dtype fp8 (if the model tolerates it)",
                f"halves bytes per token: the same memory holds {2 * pool:,} tokens "
                f"instead of {pool:,}",
            )
        )
    out.append(
        Remedy(
            "grow the pool: raise --gpu-memory-utilization or --kv-cache-memory-bytes",
            "only where the card has free memory the pool cannot reach (see layer 1)",
        )
    )
    return out
