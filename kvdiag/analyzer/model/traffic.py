"""The incident's own traffic, as requests the simulator can replay.

From the client's request log when there is one: exact send times and lengths, and which
request was sent as another finished (a closed-loop client, replayed as one). Else from the
engine's counters: the requests finished per scrape interval, spread evenly over it, each
with lengths drawn from the length histograms' buckets by a seeded generator (the seed is
in the output, so a run is repeatable). The source says which; coarse evidence widens the
prediction's range.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from kvdiag.analyzer.model.queries import counter, counter_total, histogram_buckets
from kvdiag.analyzer.model.reads import Reads
from kvdiag.domain.records.traffic import Request

CLIENT = "client request log"
COUNTERS = "request counters and length histograms"
FOLLOW_S = 0.005  # a closed-loop client sends its next request within a millisecond or two
DEFAULT_SEED = 20261202


@dataclass(frozen=True, slots=True)
class Traffic:
    requests: tuple[Request, ...]
    source: str  # CLIENT | COUNTERS | "" (none)
    seed: int | None  # the draws' seed, when lengths were drawn
    closed_loop: bool  # some requests were sent as others finished
    prefix_hit_rate: float  # observed share of prompt tokens found in the prefix cache

    @property
    def exact(self) -> bool:
        return self.source == CLIENT


def traffic(reader: Reads, seed: int = DEFAULT_SEED) -> Traffic:
    hit = _hit_rate(reader)
    rows = reader.sql(
        "SELECT send_ts, end_ts, prompt_tokens, completion_tokens, max_tokens "
        "FROM client_requests WHERE send_ts IS NOT NULL "
        "ORDER BY send_ts, source_path, source_line"
    ).to_dicts()
    if any(r["prompt_tokens"] is not None for r in rows):
        rows = _lengths_filled(rows)
        requests, chained = _from_client(rows, hit)
        return Traffic(requests, CLIENT, None, chained, hit)
    drawn = _from_counters(reader, seed, hit)
    return Traffic(drawn, COUNTERS if drawn else "", seed if drawn else None, False, hit)


def _lengths_filled(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request the server turned away (HTTP 503) was sent all the same, but no server
    counted its prompt: it is replayed with the median prompt of those counted (its
    max_tokens as its output), so that a plan with room for it admits it."""
    known = sorted(int(r["prompt_tokens"]) for r in rows if r["prompt_tokens"] is not None)
    median = known[len(known) // 2]
    return [r if r["prompt_tokens"] is not None else {**r, "prompt_tokens": median} for r in rows]


def _hit_rate(reader: Reads) -> float:
    """Prefix-cache hits / queries (tokens) over the run, from the engine's counters."""
    queries = counter_total(reader, "prefix_cache_queries")
    hits = counter_total(reader, "prefix_cache_hits")
    return (hits or 0.0) / queries if queries else 0.0


def _cached(prompt: int, hit: float) -> int:
    return int(prompt * hit)


def _from_client(rows: list[dict[str, Any]], hit: float) -> tuple[tuple[Request, ...], bool]:
    t0: datetime = rows[0]["send_ts"]
    ends = sorted(
        ((r["end_ts"], i) for i, r in enumerate(rows) if r["end_ts"] is not None),
        key=lambda e: e[0],
    )
    claimed: set[int] = set()
    out = []
    chained = False
    for r in rows:
        after, gap = _predecessor(r["send_ts"], ends, claimed)
        chained |= after is not None
        output = r["completion_tokens"] or r["max_tokens"] or 1
        prompt = int(r["prompt_tokens"])
        out.append(
            Request(
                (r["send_ts"] - t0).total_seconds(),
                prompt,
                int(output),
                _cached(prompt, hit),
                after,
                gap,
            )
        )
    return tuple(out), chained


def _predecessor(
    sent: datetime, ends: list[tuple[datetime, int]], claimed: set[int]
) -> tuple[int | None, float]:
    """The request that finished just before this one was sent (unclaimed), and the gap."""
    best = None
    for end, i in ends:
        gap = (sent - end).total_seconds()
        if gap < 0:
            break
        if gap <= FOLLOW_S and i not in claimed:
            best = (i, gap)
    if best is None:
        return None, 0.0
    claimed.add(best[0])
    return best


def _from_counters(reader: Reads, seed: int, hit: float) -> tuple[Request, ...]:
    finished = counter(reader, "request_success")
    if finished.is_empty():
        return ()
    per = finished.drop_nulls("ts").group_by("ts").agg(n=pl.col("value").sum()).sort("ts")
    rng = random.Random(seed)
    prompts = _sampler(histogram_buckets(reader, "request_prompt_tokens"), rng)
    outputs = _sampler(histogram_buckets(reader, "request_generation_tokens"), rng)
    if prompts is None or outputs is None:
        return ()
    out = []
    times = per["ts"].to_list()
    values = per["n"].to_list()
    t0 = times[0]
    for (a, va), (b, vb) in zip(
        zip(times, values, strict=True), zip(times[1:], values[1:], strict=True), strict=False
    ):
        n = max(0, round(vb - va))
        span = (b - a).total_seconds()
        for k in range(n):
            p = prompts()
            at = (a - t0).total_seconds() + span * k / n
            out.append(Request(at, p, outputs(), _cached(p, hit)))
    return tuple(out)


def _sampler(buckets: list[tuple[float, float]], rng: random.Random) -> Any:
    """A draw from a cumulative histogram: a bucket by its share, uniform inside it."""
    edges = [(le, n) for le, n in buckets if n > 0]
    if not edges or edges[-1][1] <= 0:
        return None
    total = edges[-1][1]
    finite = [le for le, _ in edges if le != float("inf")]
    top = finite[-1] if finite else 1.0

    def draw() -> int:
        u = rng.random() * total
        low = 0.0
        for le, n in edges:
            high = top if le == float("inf") else le
            if u <= n:
                return max(1, int(rng.uniform(low, high)))
            low = high
        return max(1, int(top))

    return draw
