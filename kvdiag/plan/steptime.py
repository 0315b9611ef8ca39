"""How long one scheduler step takes on this engine, fitted from the incident's own work.

Over each window of the run (WINDOW_S of counter scrapes, else each stats line's 10 s)
the engine computed P prompt tokens and G generated tokens with R requests running on
average. A decode step produces one token per running request, so the window held about
G / R decode steps (and P / budget prefill-only steps when nothing decoded). The model

    window seconds = steps x overhead + P x per_prefill_token + G x per_decode_token

is fitted over the busy windows by least squares, coefficients kept non-negative (a
negative one is dropped and the rest refitted). Idle windows say nothing and are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kvdiag.analyzer.store.database import StoreReader
from kvdiag.plan.sim import StepModel

WINDOW_S = 5.0
# When the run holds no throughput at all: a step of a small model on a small card.
FALLBACK = StepModel(0.02, 0.0002, 0.0005, 0.0)


@dataclass(frozen=True, slots=True)
class Window:
    seconds: float
    prompt: float
    generated: float
    running: float
    held: float = 0.0  # KV tokens held on average (usage x pool): what attention reads


@dataclass(frozen=True, slots=True)
class Fit:
    model: StepModel
    windows: int
    source: str  # "counter scrapes" | "stats lines" | "none: a default step model"
    error: float  # relative RMS error of the fitted window times


def fit_step_model(reader: StoreReader, budget: int, pool_tokens: int) -> Fit:
    windows, source = _counter_windows(reader, pool_tokens), "counter scrapes"
    if len(windows) < 3:
        windows, source = _stats_windows(reader, pool_tokens), "stats lines"
    busy = [w for w in windows if w.generated > 0 or w.prompt > 0]
    if len(busy) < 3:
        return Fit(FALLBACK, 0, "none: a default step model", float("nan"))
    rows = [_regressors(w, budget) for w in busy]
    coef = _nonneg_least_squares(rows, [w.seconds for w in busy])
    model = StepModel(*coef)
    return Fit(model, len(busy), source, _relative_error(model, busy, budget))


def _regressors(w: Window, budget: int) -> tuple[float, ...]:
    steps = _steps(w, budget)
    return (steps, w.prompt, w.generated, steps * w.held)


def _steps(w: Window, budget: int) -> float:
    decode_steps = w.generated / max(w.running, 1.0)
    return max(decode_steps, w.prompt / budget if budget else 0.0)


def _relative_error(model: StepModel, windows: list[Window], budget: int) -> float:
    sq = 0.0
    coef = (model.overhead, model.per_prefill_token, model.per_decode_token, model.per_held_token)
    for w in windows:
        predicted = sum(c * x for c, x in zip(coef, _regressors(w, budget), strict=True))
        sq += ((predicted - w.seconds) / w.seconds) ** 2
    return float((sq / len(windows)) ** 0.5)


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


def _counter_windows(reader: StoreReader, pool_tokens: int) -> list[Window]:
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


def _stats_windows(reader: StoreReader, pool_tokens: int) -> list[Window]:
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


def _nonneg_least_squares(rows: list[tuple[float, ...]], y: list[float]) -> tuple[float, ...]:
    """Least squares with every coefficient >= 0: drop the most negative, refit."""
    active = list(range(len(rows[0])))
    while active:
        sub = [tuple(r[i] for i in active) for r in rows]
        coef = _solve_normal(sub, y)
        if coef is not None and min(coef) >= 0:
            full = [0.0] * len(rows[0])
            for i, c in zip(active, coef, strict=True):
                full[i] = c
            return tuple(full)
        worst = active[coef.index(min(coef))] if coef is not None else active[-1]
        active.remove(worst)
    return (0.0,) * len(rows[0])


def _solve_normal(x: list[tuple[float, ...]], y: list[float]) -> list[float] | None:
    """(X'X) b = X'y by Gaussian elimination; None when singular."""
    k = len(x[0])
    a = [[sum(r[i] * r[j] for r in x) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * v for r, v in zip(x, y, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda row: abs(a[row][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for row in range(k):
            if row != col:
                f = a[row][col] / a[col][col]
                a[row] = [v - f * w for v, w in zip(a[row], a[col], strict=True)]
                b[row] -= f * b[col]
    return [b[i] / a[i][i] for i in range(k)]
