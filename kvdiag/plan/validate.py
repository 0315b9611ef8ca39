"""How far the simulated baseline is from what was observed, and what that allows.

The bounds are the issue's: peak KV usage within 10 points, max waiting within 25 % or 3
requests, preemptions zero exactly when observed zero, queue time p95 within a factor of
1.5. Queue times are compared as the engine's histogram would have shown the simulated
ones (the same bucket bounds, the same interpolation): vLLM's first bucket is 0.3 s wide,
and a simulated 0.1 s is no more precise than the observed "somewhere under 0.3 s".
"""

from __future__ import annotations

import polars as pl

from kvdiag.domain.histograms import bucket_quantile
from kvdiag.domain.records.plan import Outcome

USAGE_POINTS = 0.10
WAITING_SHARE, WAITING_ABS = 0.25, 3
QUEUE_FACTOR = 1.5


def quantile(
    values: tuple[float, ...], q: float, bounds: list[float] | None = None
) -> float | None:
    """The q-quantile of the values: exact, or through histogram bucket bounds."""
    if not values:
        return None
    if bounds:
        edges = sorted({*bounds, float("inf")})
        counts = [sum(1 for v in values if v <= le) for le in edges]
        value = bucket_quantile(q, pl.DataFrame({"le": edges, "count": counts}))
        return None if value != value else round(value, 4)
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (k - low), 4)


def errors(observed: Outcome, simulated: Outcome) -> dict[str, float | None]:
    """Per quantity: the simulated minus observed usage (points), the waiting and queue
    time ratios, and whether preemptions agree on zero (0 agrees, 1 does not)."""
    out: dict[str, float | None] = {}
    o, s = observed, simulated
    out["peak_kv_usage"] = (
        round(s.peak_kv_usage - o.peak_kv_usage, 4)
        if o.peak_kv_usage is not None and s.peak_kv_usage is not None
        else None
    )
    out["max_waiting"] = _ratio(o.max_waiting, s.max_waiting)
    out["preemptions"] = (
        float((o.preemptions == 0) != (s.preemptions == 0))
        if o.preemptions is not None and s.preemptions is not None
        else None
    )
    out["queue_time_p95_s"] = _ratio(o.queue_time_p95_s, s.queue_time_p95_s)
    out["ttft_p95_s"] = _ratio(o.ttft_p95_s, s.ttft_p95_s)
    return out


def _ratio(observed: float | None, simulated: float | None) -> float | None:
    if observed is None or simulated is None:
        return None
    if observed == simulated:
        return 1.0
    if observed <= 0:
        return float("inf") if simulated > 0 else 1.0
    return round(simulated / observed, 4)


def within(observed: Outcome, simulated: Outcome) -> dict[str, bool]:
    """Whether each validated quantity is within its bound (absent evidence passes)."""
    err = errors(observed, simulated)
    o, s = observed, simulated
    ok = {
        "peak_kv_usage": err["peak_kv_usage"] is None or abs(err["peak_kv_usage"]) <= USAGE_POINTS
    }
    ok["max_waiting"] = (
        o.max_waiting is None
        or s.max_waiting is None
        or abs(s.max_waiting - o.max_waiting) <= max(WAITING_ABS, WAITING_SHARE * o.max_waiting)
    )
    ok["preemptions"] = not err["preemptions"]
    queue = err["queue_time_p95_s"]
    ok["queue_time_p95_s"] = queue is None or 1 / QUEUE_FACTOR <= queue <= QUEUE_FACTOR
    return ok
