"""Where the congestion knee is: the load at which requests start to wait, and the one at
which TTFT p95 doubles, on a configuration.

For a closed-loop incident the load is the number of clients, each sending the incident's
requests back to back (lengths cycled in their recorded order) for KNEE_SECONDS; for an
open-loop one it is the arrival rate, the incident's arrivals compressed or stretched.
Loads double from the smallest until both are found (or MAX_DOUBLINGS pass).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvdiag.plan.sim import Engine, Request, Result, simulate
from kvdiag.plan.validate import quantile

KNEE_SECONDS = 60.0
MAX_DOUBLINGS = 10
WAIT_AT_LEAST = 1


@dataclass(frozen=True, slots=True)
class KneePoint:
    load: float  # clients, or requests/s
    max_waiting: int
    ttft_p95_s: float | None
    preemptions: int


@dataclass(frozen=True, slots=True)
class Knee:
    unit: str  # "clients" | "requests/s"
    waits_from: float | None  # the first load at which requests wait
    ttft_doubles_at: float | None  # the first load whose TTFT p95 is twice the lightest's
    points: tuple[KneePoint, ...]


def clients_load(
    lengths: tuple[Request, ...], clients: int, per_client: int
) -> tuple[Request, ...]:
    """`clients` clients each sending `per_client` requests back to back, of the recorded
    lengths taken in order."""
    out: list[Request] = []
    for c in range(clients):
        for k in range(per_client):
            src = lengths[(c * per_client + k) % len(lengths)]
            after = None if k == 0 else len(out) - 1
            out.append(Request(0.0, src.prompt, src.output, src.cached, after))
    return tuple(out)


def _per_client(lengths: tuple[Request, ...], engine: Engine) -> int:
    """Requests per client for a run of about KNEE_SECONDS at light load."""
    mean_prompt = sum(r.prompt for r in lengths) / len(lengths)
    mean_output = sum(r.output for r in lengths) / len(lengths)
    one = engine.step.seconds(int(mean_prompt), 0) + mean_output * engine.step.seconds(0, 1)
    return int(min(50, max(2, KNEE_SECONDS / max(one, 1e-3))))


def _point(load: float, result: Result) -> KneePoint:
    return KneePoint(load, result.max_waiting, quantile(result.ttfts, 0.95), result.preemptions)


def find_knee(requests: tuple[Request, ...], engine: Engine, closed: bool) -> Knee:
    """Double the load from one client (or the incident's own rate, halved down to where
    nothing waits) until requests wait and TTFT p95 has doubled."""
    points: list[KneePoint] = []
    per_client = _per_client(requests, engine)
    load = 1.0
    for _ in range(MAX_DOUBLINGS):
        if closed:
            trial = clients_load(requests, int(load), per_client)
        else:
            trial = tuple(dataclasses.replace(r, arrival=r.arrival / load) for r in requests)
        points.append(_point(load, simulate(trial, engine)))
        if _found(points):
            break
        load *= 2
    base = points[0].ttft_p95_s
    waits = next((p.load for p in points if p.max_waiting >= WAIT_AT_LEAST), None)
    doubles = next(
        (p.load for p in points if base and p.ttft_p95_s and p.ttft_p95_s >= 2 * base), None
    )
    return Knee("clients" if closed else "x the incident's rate", waits, doubles, tuple(points))


def _found(points: list[KneePoint]) -> bool:
    base = points[0].ttft_p95_s
    waits = any(p.max_waiting >= WAIT_AT_LEAST for p in points)
    doubled = any(base and p.ttft_p95_s and p.ttft_p95_s >= 2 * base for p in points)
    return waits and bool(doubled)
