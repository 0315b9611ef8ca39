"""Chart geometry: time-series line charts and the per-GPU memory bars, as plain numbers.

The HTML template draws these as inline SVG, so the report needs no script and no
plotting library: a few hundred lines of arithmetic are smaller than any dependency and
give byte-identical output for goldens. Every label is escaped by the template.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

from kvdiag.domain.fmt import fmt_bytes, fmt_quantity, humanise
from kvdiag.domain.ledger import CUDA_GRAPH, UNATTRIBUTED
from kvdiag.domain.records.diagnosis import Series
from kvdiag.reports.ledger import GpuLedger

WIDTH, HEIGHT = 720, 190
LEFT, RIGHT, TOP, BOTTOM = 56, 14, 12, 26
PALETTE = 4  # CSS classes s0..s3 (colour and dash pattern)
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)


@dataclass(frozen=True, slots=True)
class ChartSpec:
    key: str
    title: str
    unit: str
    series: tuple[str, ...]
    needs: str  # what the inputs must hold for this chart, said when it is empty
    y_max: float | None = None
    threshold: float | None = None


CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec(
        "usage",
        "KV cache usage",
        "%",
        ("kv_cache_usage",),
        "vllm:kv_cache_usage_perc scrapes or the engine's stats lines",
        y_max=100.0,
        threshold=90.0,
    ),
    ChartSpec(
        "requests",
        "Requests running and waiting",
        "requests",
        ("num_requests_running", "num_requests_waiting"),
        "num_requests_running / num_requests_waiting scrapes or stats lines",
    ),
    ChartSpec(
        "preemptions",
        "Preemptions (cumulative)",
        "preemptions",
        ("num_preemptions",),
        "vllm:num_preemptions_total scrapes, or stats lines that print preemptions "
        "(vLLM 0.32's never do)",
    ),
    ChartSpec(
        "latency",
        "Queue time and time to first token, p99",
        "s",
        ("request_queue_time_p99", "time_to_first_token_p99"),
        "the request_queue_time / time_to_first_token histograms in /metrics scrapes",
    ),
    ChartSpec(
        "throughput",
        "Prompt vs generation throughput",
        "tokens/s",
        ("prompt_throughput", "generation_throughput"),
        "stats lines or prompt/generation token counters",
    ),
)

SERIES_LABELS = {
    "kv_cache_usage": "KV usage",
    "num_requests_running": "running",
    "num_requests_waiting": "waiting",
    "num_preemptions": "preemptions",
    "request_queue_time_p99": "queue time p99",
    "time_to_first_token_p99": "TTFT p99",
    "prompt_throughput": "prompt",
    "generation_throughput": "generation",
}


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True, slots=True)
class Line:
    label: str
    style: str  # CSS class: s0..s3
    segments: tuple[str, ...]  # SVG polyline points, split where samples are missing
    dots: tuple[tuple[float, float], ...]  # lone samples, which a polyline would not show
    peak: str
    source: str


@dataclass(frozen=True, slots=True)
class LineChart:
    key: str
    title: str
    unit: str
    needs: str
    lines: tuple[Line, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    window: tuple[float, float] | None  # x and width of the incident band
    threshold: Tick | None
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


@dataclass(frozen=True, slots=True)
class TimeAxis:
    """One x scale shared by every chart, so their events line up vertically."""

    start: float
    end: float
    date: str  # the UTC date(s) the axis covers

    def x(self, t: float) -> float:
        return LEFT + (t - self.start) / (self.end - self.start) * (WIDTH - RIGHT - LEFT)


def epoch(iso: str) -> float:
    """An ISO time, read as UTC (the series are), as seconds since the epoch."""
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def time_axis(series: Sequence[Series], window: tuple[str, str] | None) -> TimeAxis | None:
    times = [epoch(t) for s in series for t, _ in s.points]
    times += [epoch(t) for t in window or ()]
    if not times:
        return None
    start, end = min(times), max(times)
    if end - start < 1:
        start, end = start - 30, end + 30
    first, last = _utc(start).date().isoformat(), _utc(end).date().isoformat()
    return TimeAxis(start, end, first if first == last else f"{first} to {last}")


def tick_step(span: float) -> float:
    """Seconds between time ticks: the smallest round step that gives at most 7 ticks."""
    return next((s for s in _TIME_STEPS if span / s <= 7), 86400 * math.ceil(span / 86400 / 7))


def _time_ticks(axis: TimeAxis) -> tuple[Tick, ...]:
    span = axis.end - axis.start
    step = tick_step(span)
    fmt = "%H:%M:%S" if step < 60 else "%H:%M" if span < 86400 else "%m-%d %H:%M"
    t = math.ceil(axis.start / step) * step
    ticks = []
    while t <= axis.end:
        ticks.append(Tick(round(axis.x(t), 1), _utc(t).strftime(fmt)))
        t += step
    return tuple(ticks)


def nice_max(value: float, count: int = 4) -> tuple[float, float]:
    """A round top for the y axis and its tick step: 1, 2, 2.5 or 5 times a power of ten."""
    if value <= 0:
        return 1.0, 0.25
    raw = value / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return math.ceil(value / step - 1e-9) * step, step


def _y_label(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _segments(
    points: Sequence[tuple[float, float]], xs: Sequence[float]
) -> tuple[tuple[str, ...], tuple[tuple[float, float], ...]]:
    """Polyline point lists, broken where the gap between samples is over 5 usual steps,
    and the lone samples between such gaps (drawn as dots)."""
    gaps = sorted(b - a for a, b in pairwise(xs))
    limit = 5 * gaps[len(gaps) // 2] if gaps else math.inf
    runs: list[list[tuple[float, float]]] = [[]]
    for i, point in enumerate(points):
        if i and xs[i] - xs[i - 1] > limit:
            runs.append([])
        runs[-1].append(point)
    lines = tuple(" ".join(f"{x:.1f},{y:.1f}" for x, y in run) for run in runs if len(run) > 1)
    dots = tuple((round(x, 1), round(y, 1)) for run in runs if len(run) == 1 for x, y in run)
    return lines, dots


@dataclass(frozen=True, slots=True)
class YScale:
    """Values to SVG y: 0 at the plot's bottom, `top` at its top."""

    top: float
    step: float

    @classmethod
    def fit(cls, peak: float, fixed_top: float | None) -> YScale:
        top, step = (fixed_top, fixed_top / 4) if fixed_top else nice_max(peak)
        return cls(max(top, peak), step)

    def y(self, v: float) -> float:
        return round(HEIGHT - BOTTOM - v / self.top * (HEIGHT - BOTTOM - TOP), 1)

    def ticks(self) -> tuple[Tick, ...]:
        count = int(self.top / self.step + 1e-9) + 1
        return tuple(Tick(self.y(k * self.step), _y_label(k * self.step)) for k in range(count))


def series_label(s: Series, with_replica: bool) -> str:
    """A series' legend label: 'running', or 'running · replica-1' when replicas differ."""
    label = SERIES_LABELS.get(s.name, humanise(s.name))
    return f"{label} · {s.replica}" if with_replica else label


def series_line(
    s: Series, style: str, label: str, axis: TimeAxis, scale: YScale, zero: float = 0.0
) -> Line:
    """One series drawn on `axis`, whose x is seconds since `zero` (0: the epoch, so clock
    time; a run's load start puts two runs on one relative axis)."""
    xs = [epoch(t) - zero for t, _ in s.points]
    points = [(axis.x(t), scale.y(v)) for t, (_, v) in zip(xs, s.points, strict=True)]
    peak = fmt_quantity(max(v for _, v in s.points), s.unit)
    lines, dots = _segments(points, xs)
    return Line(label, style, lines, dots, peak, s.source)


def _line(s: Series, index: int, axis: TimeAxis, scale: YScale, with_replica: bool) -> Line:
    return series_line(s, f"s{index % PALETTE}", series_label(s, with_replica), axis, scale)


def line_chart(
    spec: ChartSpec, series: Sequence[Series], axis: TimeAxis | None, window: tuple[str, str] | None
) -> LineChart:
    """One chart's geometry; no lines (and the spec's `needs`) when no series is present."""
    mine = [s for name in spec.series for s in series if s.name == name]
    scale = YScale.fit(max((v for s in mine for _, v in s.points), default=0.0), spec.y_max)
    if axis is None or not mine:
        return LineChart(spec.key, spec.title, spec.unit, spec.needs, (), (), (), None, None)
    multi = len({s.replica for s in mine}) > 1
    lines = tuple(_line(s, i, axis, scale, multi) for i, s in enumerate(mine))
    band = None
    if window is not None:
        a, b = (axis.x(epoch(t)) for t in window)
        band = (round(a, 1), round(max(b - a, 2.0), 1))
    threshold = None
    if spec.threshold is not None:
        threshold = Tick(scale.y(spec.threshold), f"{spec.threshold:g}{spec.unit}")
    return LineChart(
        spec.key,
        spec.title,
        spec.unit,
        spec.needs,
        lines,
        _time_ticks(axis),
        scale.ticks(),
        band,
        threshold,
    )


# SGLang retracts where vLLM preempts: the same series under the engine's own word.
_RETRACTIONS = ChartSpec(
    "preemptions",
    "Retractions (cumulative)",
    "retractions",
    ("num_preemptions",),
    "SGLang's 'KV cache pool is full. Retract requests.' or 'Decode out of memory' lines",
)


def line_charts(
    series: Sequence[Series], window: tuple[str, str] | None, evictions: str = "preemptions"
) -> tuple[LineChart, ...]:
    """Every chart of CHARTS; `evictions` is the engine's word for preemptions."""
    axis = time_axis(series, window)
    specs = (
        _RETRACTIONS if evictions == "retractions" and s.key == "preemptions" else s for s in CHARTS
    )
    return tuple(line_chart(spec, series, axis, window) for spec in specs)


# --- the memory ledger as horizontal stacked bars -------------------------------------

BAR_LEFT, BAR_RIGHT, BAR_H, BAR_GAP = 150, 14, 26, 18


def term_style(key: str) -> str:
    """The stylesheet's name for a ledger term (its class is m-<name>): the term's key, but
    for the CUDA graphs, whose class report.css spells m-graphs."""
    return "graphs" if key == CUDA_GRAPH.key else key


@dataclass(frozen=True, slots=True)
class Segment:
    x: float
    width: float
    style: str  # CSS class m-<term_style(key)>: m-weights, m-kv_pool, ..., m-unattributed
    label: str
    value: str
    show_value: bool  # wide enough to print the value inside


@dataclass(frozen=True, slots=True)
class Bar:
    name: str
    y: float
    segments: tuple[Segment, ...]
    total: str


@dataclass(frozen=True, slots=True)
class LedgerChart:
    bars: tuple[Bar, ...]
    width: int
    height: int
    left: int
    right: int
    bar_height: int


def ledger_chart(ledgers: Sequence[GpuLedger]) -> LedgerChart | None:
    """Bars on one scale (the largest card), so GPUs of unequal fill compare at a glance."""
    if not ledgers:
        return None
    sizes = [g.total or sum(e.bytes for e in g.entries) for g in ledgers]
    scale = (WIDTH - BAR_RIGHT - BAR_LEFT) / (max(sizes) or 1)
    bars = []
    for i, g in enumerate(ledgers):
        parts = [(e.key, e.label, e.bytes) for e in g.entries]
        rest = g.unattributed
        if rest is not None and rest > 0:
            parts.append((UNATTRIBUTED.key, UNATTRIBUTED.bar_label, rest))
        x, segments = float(BAR_LEFT), []
        for key, label, size in parts:
            w, style = max(size * scale, 0.0), f"m-{term_style(key)}"
            segments.append(
                Segment(round(x, 1), round(w, 1), style, label, fmt_bytes(size), w > 64)
            )
            x += w
        total = fmt_bytes(g.total) if g.total is not None else "card total unknown"
        bars.append(Bar(g.name, TOP + i * (BAR_H + BAR_GAP), tuple(segments), total))
    height = TOP + len(bars) * (BAR_H + BAR_GAP) + 4
    return LedgerChart(tuple(bars), WIDTH, height, BAR_LEFT, WIDTH - BAR_RIGHT, BAR_H)
