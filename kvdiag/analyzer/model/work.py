"""The incident's work over time: the windows a step-time model is fitted to, and how long
the queue took to drain. `kvdiag plan` fits and validates its replay against them.

Over each window of the run (WINDOW_S of counter scrapes, else each stats line's 10 s) the
engine computed P prompt tokens and G generated tokens with R requests running and H KV
tokens held on average. The source says which evidence the windows came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kvdiag.analyzer.model.reads import Reads

WINDOW_S = 5.0


@dataclass(frozen=True, slots=True)
class Window:
    seconds: float
    prompt: float
    generated: float
    running: float
    held: float = 0.0  # KV tokens held on average (usage x pool): what attention reads


@dataclass(frozen=True, slots=True)
class StepWindows:
    windows: list[Window]
    source: str  # "counter scrapes" | "stats lines"


def step_windows(reader: Reads, pool_tokens: int) -> StepWindows:
    """The counter scrapes' windows, else (fewer than three) the stats lines'."""
    windows = _counter_windows(reader, pool_tokens)
    if len(windows) >= 3:
        return StepWindows(windows, "counter scrapes")
    return StepWindows(_stats_windows(reader, pool_tokens), "stats lines")


_COUNTERS = (
    "SELECT ts, sum(value) FILTER (WHERE metric = 'prompt_tokens') AS p, "
    "sum(value) FILTER (WHERE metric = 'generation_tokens') AS g "
    "FROM metric_samples WHERE suffix = 'total' AND metric IN ('prompt_tokens', "
    "'generation_tokens') AND ts IS NOT NULL GROUP BY ts ORDER BY ts"
)
_GAUGES = (
    "SELECT ts, sum(value) FILTER (WHERE metric = 'num_requests_running') AS r, "
    "max(value) FILTER (WHERE metric = 'kv_cache_usage') AS u FROM metric_samples "
    "WHERE suffix = '' AND metric IN ('num_requests_running', 'kv_cache_usage') "
    "AND ts IS NOT NULL GROUP BY ts ORDER BY ts"
)


def _counter_windows(reader: Reads, pool_tokens: int) -> list[Window]:
    totals = reader.sql(_COUNTERS).to_dicts()
    gauges = {r["ts"]: r for r in reader.sql(_GAUGES).to_dicts()}
    out: list[Window] = []
    start: dict[str, Any] | None = None
    seen: list[tuple[float, float]] = []
    for row in totals:
        if row["p"] is None or row["g"] is None:
            continue
        if start is None:
            start, seen = row, []
            continue
        g = gauges.get(row["ts"]) or {}
        seen.append((float(g.get("r") or 0.0), float(g.get("u") or 0.0) * pool_tokens))
        span = _seconds(start["ts"], row["ts"])
        if span < WINDOW_S:
            continue
        dp, dg = row["p"] - start["p"], row["g"] - start["g"]
        busy = [(r, h) for r, h in seen if r > 0]
        if dp >= 0 and dg >= 0 and dp + dg > 0 and busy:  # work done, no counter reset
            # the share of the window something ran: idle scrapes add no step time
            share = len(busy) / len(seen)
            running = sum(r for r, _ in busy) / len(busy)
            held = sum(h for _, h in busy) / len(busy)
            out.append(Window(span * share, dp, dg, running, held))
        start, seen = row, []
    return out


def _seconds(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds()


def _stats_windows(reader: Reads, pool_tokens: int) -> list[Window]:
    rows = reader.sql(
        "SELECT prompt_tps, gen_tps, running, kv_usage_pct FROM log_stats WHERE prompt_tps "
        "IS NOT NULL AND gen_tps IS NOT NULL AND running > 0 ORDER BY ts, source_line"
    ).to_dicts()
    return [
        Window(
            10.0,
            10.0 * r["prompt_tps"],
            10.0 * r["gen_tps"],
            float(r["running"]),
            float(r["kv_usage_pct"] or 0.0) / 100 * pool_tokens,
        )
        for r in rows
    ]


# Requests waiting at each moment: the scrapes (summed over a replica's engines), else the
# stats lines.
_WAITING = (
    "SELECT ts, sum(value) AS n FROM metric_samples WHERE suffix = '' AND "
    "metric = 'num_requests_waiting' AND ts IS NOT NULL GROUP BY ts ORDER BY ts"
)
_WAITING_LINES = (
    "SELECT ts, waiting AS n FROM log_stats WHERE ts IS NOT NULL AND waiting IS NOT NULL "
    "ORDER BY ts"
)


def observed_drain(reader: Reads) -> float | None:
    """The longest stretch of consecutive observations with requests waiting, in seconds
    (from the first such observation to the first without); None without observations."""
    rows = reader.sql(_WAITING).to_dicts() or reader.sql(_WAITING_LINES).to_dicts()
    if not rows:
        return None
    longest, since = 0.0, None
    for r in rows:
        if r["n"] and since is None:
            since = r["ts"]
        elif not r["n"] and since is not None:
            longest = max(longest, (r["ts"] - since).total_seconds())
            since = None
    if since is not None:
        longest = max(longest, (rows[-1]["ts"] - since).total_seconds())
    return round(longest, 3)
