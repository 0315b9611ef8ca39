"""How long one scheduler step takes on this engine, fitted from the incident's own work.

Over each window of the run (work.py: a few seconds of counter scrapes, else each stats
line's 10 s)
the engine computed P prompt tokens and G generated tokens with R requests running on
average. A decode step produces one token per running request, so the window held about
G / R decode steps (and P / budget prefill-only steps when nothing decoded). The model

    window seconds = steps x overhead + P x per_prefill_token + G x per_decode_token

is fitted over the busy windows by least squares, coefficients kept non-negative (a
negative one is dropped and the rest refitted). Idle windows say nothing and are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdiag.analyzer.model.work import StepWindows, Window
from kvdiag.plan.sim import StepModel

# When the run holds no throughput at all: a step of a small model on a small card.
FALLBACK = StepModel(0.02, 0.0002, 0.0005, 0.0)


@dataclass(frozen=True, slots=True)
class Fit:
    model: StepModel
    windows: int
    source: str  # "counter scrapes" | "stats lines" | "none: a default step model"
    error: float  # relative RMS error of the fitted window times


def fit_step_model(work: StepWindows, budget: int) -> Fit:
    """The step model fitted to the incident's windows of work (the incident model's)."""
    windows, source = work.windows, work.source
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
