"""How far an estimate made from request lengths can be off: bounds, not means.

A mean length says nothing about which requests were running at a moment: with a few
3,000-token requests among hundreds of 150-token ones, three running requests may be the
three long ones. What the evidence allows is a range per request: exact lengths from a
request log, bucket edges from a histogram (a request in the (500, 1000] bucket is longer
than 500 and at most 1,000 tokens), nothing narrower than 1 token to max_model_len from
a stats line alone. `Spread` keeps those per-request ranges; the sum over `running`
requests lies between the `running` smallest lower bounds and the `running` largest
upper bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvdiag.analyzer.model.quantities.demand import slots

# (bound, requests): `requests` requests whose length is at least (or at most) `bound`.
Weighted = tuple[tuple[float, int], ...]


@dataclass(frozen=True, slots=True)
class Spread:
    """Per-request length bounds of the requests the evidence saw."""

    lows: Weighted  # ascending: each request's shortest possible length
    highs: Weighted  # descending: each request's longest possible length
    source: str

    @property
    def shortest(self) -> float:
        return self.lows[0][0] if self.lows else 0.0

    @property
    def longest(self) -> float:
        return self.highs[0][0] if self.highs else math.inf

    def low(self, running: int) -> float:
        """Fewest tokens `running` of these requests hold together."""
        return _sum_first(self.lows, running)

    def high(self, running: int) -> float:
        """Most tokens `running` of these requests hold together."""
        return _sum_first(self.highs, running)

    def grown_by(self, extra: Spread) -> Spread:
        """What each request grows to: its bounds plus `extra`'s (its max_tokens or what it
        generated), paired rank by rank at both ends, which bounds every pairing."""
        return Spread(_merge(self.lows, extra.lows), _merge(self.highs, extra.highs), self.source)

    def capped(self, top: float) -> Spread:
        """No request longer than `top` (max_model_len holds prompt and generation)."""
        return self._mapped(lambda v: min(v, top))

    def in_slots(self, block_size: int | None) -> Spread:
        """The slots each request holds: whole blocks (rounding up keeps both ends bounds)."""
        return self._mapped(lambda v: slots(v, block_size) if math.isfinite(v) else v)

    def _mapped(self, fn: Callable[[float], float]) -> Spread:
        """Each bound through a non-decreasing `fn` (the orders stay as they are)."""
        return Spread(_remap(self.lows, fn), _remap(self.highs, fn), self.source)

    def with_generated(self, generated: Spread) -> Spread:
        """Prompt bounds with the generated part added to the longest: a request's length is
        at most its prompt's bound plus its generation's, pair them as they may. The lower
        bounds stay the prompt's: a running request may not have generated yet."""
        return Spread(self.lows, _merge(self.highs, generated.highs), self.source)


def _sum_first(weighted: Weighted, n: int) -> float:
    """Sum of the first `n` values; past the end the first value repeats (more requests
    ran than the evidence counted: each extra one is taken as short as the shortest seen
    for a lower bound, as long as the longest for an upper one)."""
    total, left = 0.0, n
    for value, count in weighted:
        take = min(count, left)
        total += value * take
        left -= take
        if not left:
            return total
    return total + (weighted[0][0] * left if weighted else 0.0)


def _remap(weighted: Weighted, fn: Callable[[float], float]) -> Weighted:
    """Values through `fn`, equal results merged (a non-decreasing `fn` keeps the order)."""
    out: list[tuple[float, int]] = []
    for value, count in weighted:
        mapped = fn(value)
        if out and out[-1][0] == mapped:
            out[-1] = (mapped, out[-1][1] + count)
        else:
            out.append((mapped, count))
    return tuple(out)


def _merge(a: Weighted, b: Weighted) -> Weighted:
    """Rank-wise sums of two lists sorted alike: the k-th of a plus the k-th of b.

    The k largest sums of any pairing are at most the k largest of each part added, and
    the k smallest at least the k smallest of each, so the merged list bounds every
    pairing whichever way both lists are sorted.
    """
    out: list[tuple[float, int]] = []
    ia = ib = 0
    left_a = a[0][1] if a else 0
    left_b = b[0][1] if b else 0
    while ia < len(a) and ib < len(b):
        take = min(left_a, left_b)
        out.append((a[ia][0] + b[ib][0], take))
        left_a -= take
        left_b -= take
        if not left_a:
            ia += 1
            left_a = a[ia][1] if ia < len(a) else 0
        if not left_b:
            ib += 1
            left_b = b[ib][1] if ib < len(b) else 0
    return tuple(out)


def exact(lows: Iterable[float], highs: Iterable[float], source: str) -> Spread:
    """Per-request bounds known one by one (a request log)."""
    return Spread(_weigh(lows, reverse=False), _weigh(highs, reverse=True), source)


def _weigh(values: Iterable[float], *, reverse: bool) -> Weighted:
    counts: dict[float, int] = {}
    for v in values:
        counts[float(v)] = counts.get(float(v), 0) + 1
    return tuple(sorted(counts.items(), reverse=reverse))


def from_buckets(
    cumulative: Sequence[tuple[float, float]], top: float | None, source: str
) -> Spread | None:
    """Per-request bounds from a histogram's cumulative (le, count) rows: a request in
    bucket (a, b] is longer than a and at most b; the +Inf bucket is capped at `top`
    (max_model_len) when known, else unbounded. None without observations."""
    lows: list[tuple[float, int]] = []
    highs: list[tuple[float, int]] = []
    previous_le, previous_count = 0.0, 0.0
    for le, count in sorted(cumulative):
        added = round(max(count, previous_count) - previous_count)
        if added > 0:
            upper = min(le, top) if top else le  # +Inf stays unbounded without a cap
            lows.append((previous_le, added))
            highs.append((upper, added))
        previous_le, previous_count = le, max(count, previous_count)
    if not lows:
        return None
    return Spread(tuple(lows), tuple(sorted(highs, reverse=True)), source)


def unknown(longest: float, source: str) -> Spread:
    """No lengths at all: each running request holds 1 token to `longest` tokens."""
    return Spread(((1.0, 1),), ((longest, 1),), source)


@dataclass(frozen=True, slots=True)
class Range:
    """An estimate's bounds; `low` <= the true value <= `high`."""

    low: float
    high: float

    def under(self, line: float) -> bool:
        """The whole range is under `line`: the claim holds whatever the spread."""
        return self.high < line

    def at_or_over(self, line: float) -> bool:
        return self.low >= line

    def straddles(self, line: float) -> bool:
        return not self.under(line) and not self.at_or_over(line)


def payload_range(
    allocated: float,
    running: int,
    spread: Spread,
    block_size: int | None,
    shared_prefixes: bool,
) -> Range:
    """Live tokens / allocated slots of `running` requests holding `allocated` slots.

    Two bounds come from the pool itself, not the lengths. In a paged pool every sequence
    leaves fewer than block_size empty slots, so the live tokens are at least
    allocated - running x (block_size - 1). Without shared prefix blocks every live token
    has a slot of its own, so the ratio cannot exceed 1; a length bound above that is a
    prompt counted before it was prefilled (chunked prefill fills a long prompt over
    several steps, holding only the chunks computed so far).
    """
    if allocated <= 0 or running <= 0:
        return Range(0.0, math.inf)
    low, high = spread.low(running), spread.high(running)
    if block_size and block_size > 1:
        low = max(low, allocated - running * (block_size - 1))
    if not shared_prefixes:
        high = min(high, allocated)
    low = min(low, high)  # lengths of finished requests may overstate a prompt mid-prefill
    return Range(low / allocated, high / allocated)
