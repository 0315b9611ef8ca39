"""Prompt tokens going in at a steady rate through a queue: the engine prefill-bound.

The stats lines average prompt throughput over 10 s, so a 27-s queue leaves two or three of
them, too few to show a plateau; a counter scraped every second shows it plainly: the
cumulative prompt tokens rise on a straight line while requests wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.demand import trend
from kvdiag.analyzer.model.queries import counter

MIN_SAMPLES = 5
STRAIGHT = 0.98  # r² of the cumulative prompt tokens against time


@dataclass(frozen=True, slots=True)
class SteadyPrefill:
    prompt_tps: float
    gen_tps: float
    samples: int
    r2: float
    row: dict[str, Any]  # the first sample of the stretch, for evidence


def _within(
    ctx: Incident, metric: str, start: datetime, end: datetime, scope: str | None
) -> pl.DataFrame:
    frame = counter(ctx, metric).filter(pl.col("ts").is_between(start, end))
    if scope is not None:
        frame = frame.filter(pl.col("replica") == scope)
    # One engine's counter series at a time are added up per scrape.
    return frame.group_by("ts").agg(pl.col("value").sum(), pl.col("sample_row").first()).sort("ts")


def steady_prefill(
    ctx: Incident, start: datetime | None, end: datetime | None, scope: str | None
) -> SteadyPrefill | None:
    """The prompt-token rate over [start, end] when the counter rose on a straight line."""
    if start is None or end is None:
        return None
    prompt = _within(ctx, "prompt_tokens", start, end, scope)
    if prompt.height < MIN_SAMPLES:
        return None
    t0 = prompt["ts"][0]
    points = [
        ((ts - t0).total_seconds(), float(v)) for ts, v in prompt.select("ts", "value").iter_rows()
    ]
    line = trend(points)
    if line is None or line.slope <= 0 or line.r2 < STRAIGHT:
        return None
    gen = _within(ctx, "generation_tokens", start, end, scope)
    span = points[-1][0] - points[0][0]
    gen_rate = (
        (float(gen["value"][-1]) - float(gen["value"][0])) / span
        if gen.height >= 2 and span
        else 0.0
    )
    return SteadyPrefill(
        line.slope, max(0.0, gen_rate), prompt.height, line.r2, prompt.row(0, named=True)
    )
