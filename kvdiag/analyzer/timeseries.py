"""Counter and gauge arithmetic shared by facts and rules."""

from __future__ import annotations

from itertools import pairwise

import polars as pl


def counter_increase(samples: pl.DataFrame) -> float:
    """Increase of a counter over its samples, per (replica, engine) series, summed.

    A drop means the process restarted and the counter began again from zero, so the
    new value counts in full. A series with one sample has no window: its value (the
    count since the process started) is the best available figure.
    """
    total = 0.0
    if samples.height == 0:
        return total
    for _, part in samples.group_by(["replica", "engine"], maintain_order=True):
        values = [v for v in part["value"].to_list() if v is not None and v == v]
        if len(values) == 1:
            total += values[0]
        for prev, cur in pairwise(values):
            total += cur - prev if cur >= prev else cur
    return total
