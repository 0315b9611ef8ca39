"""Layer 3 arithmetic: demand against the pool (domain.md §3.3, §6).

Units are whatever the caller uses (tokens, GB): the functions only compare like with like.
A request's peak is prompt + max_tokens, not its current length; admission must count it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvdiag.domain import kvmath


def slots(tokens: float, block_size: int | None) -> float:
    """Slots a sequence of `tokens` holds in a paged pool (whole blocks)."""
    if not block_size or block_size <= 1:
        return tokens
    return kvmath.blocks_for_tokens(tokens, block_size) * block_size


def requests_that_fit(pool: float, per_request: float, block_size: int | None = None) -> int:
    """How many requests of `per_request` tokens the pool holds at once (block-rounded)."""
    need = slots(per_request, block_size)
    return int(pool // need) if need > 0 else 0


def more_that_fit(pool: float, used: float, per_request: float) -> int:
    """Requests of `per_request` that still fit in what is left of the pool.

    Oracle (domain.md §6): pool 50 GB, 18 requests x 2.5 GB = 45 GB -> 2 more fit.
    """
    return max(0, int((pool - used) // per_request)) if per_request > 0 else 0


@dataclass(frozen=True, slots=True)
class Demand:
    """Demand of `requests` each growing to `per_request`, held against `pool`."""

    requests: int
    per_request: float
    pool: float

    @property
    def total(self) -> float:
        return self.requests * self.per_request

    @property
    def ratio(self) -> float:
        return self.total / self.pool if self.pool else math.inf

    @property
    def exceeds(self) -> bool:
        return self.total > self.pool


@dataclass(frozen=True, slots=True)
class DemandRange:
    """`requests` requests whose growth holds at least `low` and at most `high` of `pool`.

    A claim about the pool stands on the bound that makes it safe: they fit only when even
    the most they may hold does, and exceed it only when even the fewest does. Between
    the two the evidence does not decide.
    """

    requests: int
    low: float
    high: float
    pool: float

    @property
    def fits(self) -> bool:
        return self.high <= self.pool

    @property
    def exceeds(self) -> bool:
        return self.low > self.pool

    @property
    def straddles(self) -> bool:
        return not self.fits and not self.exceeds

    def ratio(self, tokens: float) -> float:
        return tokens / self.pool if self.pool else math.inf


def seqs_cap(pool: float, per_request: float, block_size: int | None = None) -> int:
    """The max_num_seqs that keeps worst-case demand under the pool (at least 1)."""
    return max(1, requests_that_fit(pool, per_request, block_size))


def cards_needed(demand: float, card: float) -> int:
    """Cards of `card` capacity the demand alone fills (KV only, no weights)."""
    return kvmath.cards_for(demand, card) if card > 0 else 0


@dataclass(frozen=True, slots=True)
class Trend:
    """A least-squares line through (seconds, usage) points."""

    slope: float  # usage per second
    r2: float
    last_t: float
    last_usage: float

    def seconds_to(self, level: float) -> float | None:
        """Seconds from the last point until the line reaches `level`, None if never."""
        if self.slope <= 0:
            return None
        return max(0.0, (level - self.last_usage) / self.slope)


def trend(points: Sequence[tuple[float, float]]) -> Trend | None:
    """Fit usage over time; None with fewer than three points or no time spread."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_u = sum(u for _, u in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t == 0:
        return None
    cov = sum((t - mean_t) * (u - mean_u) for t, u in points)
    slope = cov / var_t
    ss_tot = sum((u - mean_u) ** 2 for _, u in points)
    ss_res = sum((u - (mean_u + slope * (t - mean_t))) ** 2 for t, u in points)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    last_t, last_u = points[-1]
    return Trend(slope, r2, last_t, last_u)
