"""What the plan reports show, from the Plan record alone (formatted, not escaped)."""

from __future__ import annotations

from dataclasses import dataclass

from kvdiag.domain.fmt import fmt_quantity
from kvdiag.domain.records.plan import QUANTITIES, KneeAt, Outcome, Plan, Scenario

VALIDATED = ("peak_kv_usage", "max_waiting", "preemptions", "queue_time_p95_s", "ttft_p95_s")


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    observed: str
    simulated: str
    error: str
    predicted: tuple[str, ...]  # one cell per scenario shown


def value(o: Outcome, key: str, unit: str) -> str:
    return fmt_quantity(o.get(key), unit)


def error_text(plan: Plan, key: str) -> str:
    """The baseline's error: points for usage, agreement for preemptions, else a ratio."""
    err = plan.validation.get(key)
    if err is None:
        return ""
    if key == "peak_kv_usage":
        return f"{err * 100:+.1f} pts"
    if key == "preemptions":
        return "agrees on zero" if err == 0 else "disagrees on zero"
    return f"x {err:.2f}"


def predicted_text(s: Scenario, key: str, unit: str) -> str:
    shown = fmt_quantity(s.predicted.get(key), unit)
    span = s.range.get(key)
    if span and span[0] != span[1]:
        shown += f" ({fmt_quantity(span[0], unit)} to {fmt_quantity(span[1], unit)})"
    return shown


def rows(plan: Plan, scenarios: tuple[Scenario, ...]) -> list[Row]:
    return [
        Row(
            label,
            value(plan.observed, key, unit),
            value(plan.simulated, key, unit),
            error_text(plan, key) if key in VALIDATED else "",
            tuple(predicted_text(s, key, unit) for s in scenarios),
        )
        for key, label, unit in QUANTITIES
    ]


def flags_text(s: Scenario) -> str:
    return " ".join(f"{k} {v}".strip() for k, v in s.flags.items())


def scenario_title(s: Scenario) -> str:
    """The scenario's name, and its flags unless the name already spells them."""
    flags = flags_text(s)
    return s.name if flags in s.name else f"{s.name}: {flags}"


def load_sentence(plan: Plan) -> str:
    load = plan.load
    how = "a closed loop" if load.closed_loop else "open arrivals"
    seed = f", seed {load.seed}" if load.seed is not None else ""
    scale = f", replayed {load.scale:g}x as fast" if load.scale != 1 else ""
    return f"{load.requests:,} requests from the {load.source} ({how}{seed}{scale})"


def trust_sentence(plan: Plan) -> str:
    if plan.trusted:
        return "The baseline reproduces what was observed within the bounds: predictions stand."
    return (
        "The baseline misses what was observed beyond the bounds: "
        "read the predictions as directions, not numbers."
    )


def knee_sentence(k: KneeAt) -> str:
    def at(value: float | None) -> str:
        return f"{value:g} {k.unit}" if value is not None else f"not within {k.points[-1][0]:g}"

    return (
        f"requests start to wait at {at(k.waits_from)}; TTFT p95 doubles at {at(k.ttft_doubles_at)}"
    )
