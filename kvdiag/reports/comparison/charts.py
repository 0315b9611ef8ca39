"""Overlay charts of `kvdiag compare`: BEFORE and AFTER on one relative time axis.

Two runs happen at different clock times, so each is shifted to seconds since its own load
start (the first request sent or first busy sample, `Side.load_start`; the run's first point
when that is unknown). The geometry is the analysis report's (charts.py): same scales, same
gap-splitting, same SVG macro; only the x axis and the line labels differ.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvdiag.domain.records.comparison import BeforeAfter, Side
from kvdiag.domain.records.diagnosis import Series
from kvdiag.reports.charts import (
    CHARTS,
    PALETTE,
    ChartSpec,
    Line,
    LineChart,
    Tick,
    TimeAxis,
    YScale,
    epoch,
    series_label,
    series_line,
    tick_step,
)

SIDE_NAMES = ("BEFORE", "AFTER")
_BY_KEY = {spec.key: spec for spec in CHARTS}
# The analysis report's latency chart also draws TTFT; overlaid, four lines of two runs
# would crowd it, and queue time is what a change to the KV pool moves first.
OVERLAY_SPECS: tuple[ChartSpec, ...] = (
    _BY_KEY["usage"],
    _BY_KEY["requests"],
    _BY_KEY["preemptions"],
    dataclasses.replace(
        _BY_KEY["latency"],
        title="Queue time, p99",
        series=("request_queue_time_p99",),
        needs="the request_queue_time histogram in /metrics scrapes",
    ),
)


@dataclass(frozen=True, slots=True)
class RunZero:
    """Where one run's relative time starts, and what that instant is."""

    side: str  # BEFORE | AFTER
    zero: float | None  # epoch seconds; None: the run has no time series at all
    iso: str | None
    from_load_start: bool  # False: the run's first point stood in for its load start


@dataclass(frozen=True, slots=True)
class OverlayChart:
    """A chart and the runs that have no line in it (said under the chart)."""

    chart: LineChart
    missing: tuple[str, ...]  # side names without this chart's series


def run_zero(name: str, side: Side) -> RunZero:
    """The run's load start, else its first point: every chart of the run shares it."""
    if side.load_start:
        return RunZero(name, epoch(side.load_start), side.load_start, True)
    first = min((t for s in side.series for t, _ in s.points), default=None, key=epoch)
    return RunZero(name, epoch(first) if first else None, first, False)


def relative_label(seconds: float) -> str:
    """ "+0:30", "+2:00", "+1:05:00", "-0:15": time since the load start."""
    sign = "-" if seconds < 0 else "+"
    whole = round(abs(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}:{minutes:02d}:{secs:02d}"
    return f"{sign}{minutes}:{secs:02d}"


def relative_ticks(axis: TimeAxis) -> tuple[Tick, ...]:
    """Ticks on round offsets from the load start (zero is always one when in range)."""
    step = tick_step(axis.end - axis.start)
    t = math.ceil(axis.start / step) * step
    ticks = []
    while t <= axis.end:
        ticks.append(Tick(round(axis.x(t), 1), relative_label(t)))
        t += step
    return tuple(ticks)


def _charted(spec: ChartSpec, side: Side) -> list[Series]:
    return [s for name in spec.series for s in side.series if s.name == name and s.points]


def relative_axis(
    runs: Sequence[tuple[Side, RunZero]], specs: Sequence[ChartSpec] = OVERLAY_SPECS
) -> TimeAxis | None:
    """One axis for every overlay chart: the earliest to the latest relative time charted."""
    times = [
        epoch(t) - zero.zero
        for side, zero in runs
        if zero.zero is not None
        for spec in specs
        for s in _charted(spec, side)
        for t, _ in s.points
    ]
    if not times:
        return None
    start, end = min(times), max(times)
    if end - start < 1:
        start, end = start - 30, end + 30
    return TimeAxis(start, end, "")


def _style(side_index: int, series_index: int) -> str:
    """BEFORE s0, AFTER s1 in one-series charts; a second series takes s2 (BEFORE), s3."""
    return f"s{(side_index + 2 * series_index) % PALETTE}"


def _side_lines(
    spec: ChartSpec, index: int, side: Side, zero: RunZero, axis: TimeAxis, scale: YScale
) -> list[Line]:
    if zero.zero is None:
        return []
    mine = _charted(spec, side)
    multi = len({s.replica for s in mine}) > 1
    lines = []
    for s in mine:
        named = series_label(s, multi) if len(spec.series) > 1 or multi else ""
        label = f"{zero.side} {named}".rstrip()
        series_index = spec.series.index(s.name)
        lines.append(series_line(s, _style(index, series_index), label, axis, scale, zero.zero))
    return lines


def overlay_chart(
    spec: ChartSpec, runs: Sequence[tuple[Side, RunZero]], axis: TimeAxis | None
) -> OverlayChart:
    """One chart with both runs' lines, BEFORE's first; `needs` when neither has the series."""
    missing = tuple(zero.side for side, zero in runs if not _charted(spec, side))
    peak = max(
        (v for side, _ in runs for s in _charted(spec, side) for _, v in s.points), default=0
    )
    scale = YScale.fit(peak, spec.y_max)
    per_side = [
        _side_lines(spec, i, side, zero, axis, scale) if axis else []
        for i, (side, zero) in enumerate(runs)
    ]
    # Legend order: each run's lines together (before running, before waiting, after ...).
    lines = tuple(line for side_lines in per_side for line in side_lines)
    key = f"overlay-{spec.key}"
    if axis is None or not lines:
        empty = LineChart(key, spec.title, spec.unit, spec.needs, (), (), (), None, None)
        return OverlayChart(empty, missing)
    threshold = None
    if spec.threshold is not None:
        threshold = Tick(scale.y(spec.threshold), f"{spec.threshold:g}{spec.unit}")
    chart = LineChart(
        key,
        spec.title,
        spec.unit,
        spec.needs,
        lines,
        relative_ticks(axis),
        scale.ticks(),
        None,  # each run has its own incident window; one band would mislead
        threshold,
    )
    return OverlayChart(chart, missing)


def overlay_charts(r: BeforeAfter) -> tuple[tuple[OverlayChart, ...], tuple[RunZero, ...]]:
    """Every overlay chart of the record, and each run's zero (for the caption)."""
    zeros = (run_zero(SIDE_NAMES[0], r.before), run_zero(SIDE_NAMES[1], r.after))
    runs = ((r.before, zeros[0]), (r.after, zeros[1]))
    axis = relative_axis(runs)
    return tuple(overlay_chart(spec, runs, axis) for spec in OVERLAY_SPECS), zeros
