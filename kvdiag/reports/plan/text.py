"""The terminal form of a plan: the baseline observed and simulated, each scenario's
prediction with its range, the cheapest that clears the queue first."""

from __future__ import annotations

from kvdiag.domain.records.plan import Plan
from kvdiag.domain.safe_text import one_line
from kvdiag.reports.plan import view as pv
from kvdiag.reports.text import Painter

SHOWN = 4  # scenarios side by side in the terminal; the others are listed below


def render_plan_text(plan: Plan, *, color: bool = False) -> str:
    paint = Painter(color)
    shown = plan.scenarios[:SHOWN]
    lines = [
        paint(f"kvdiag {plan.kvdiag_version} — plan for {one_line(plan.incident)}", "bold"),
        f"  load: {one_line(pv.load_sentence(plan))}",
        f"  step model: {one_line(plan.step.source)}, {plan.step.windows} windows"
        + (f", error {plan.step.error:.0%}" if plan.step.error is not None else ""),
        f"  {pv.trust_sentence(plan)}",
        *(f"  - {one_line(n)}" for n in plan.notes),
        "",
        paint("SCENARIOS", "bold"),
    ]
    for i, s in enumerate(plan.scenarios, 1):
        mark = paint("clears the queue", "green") if s.clears_queue else "queue remains"
        lines.append(f"  {i}. {one_line(pv.scenario_title(s))} — {mark}")
        if s.note:
            lines.append(f"     {one_line(s.note)}")
    header = f"    {'':<42}{'OBSERVED':>17}{'BASELINE':>17}{'ERROR':>18}"
    header += "".join(f"{f'#{i}':>30}" for i in range(1, len(shown) + 1))
    lines += ["", paint("PREDICTIONS", "bold"), header]
    for row in pv.rows(plan, shown):
        cells = "".join(f" {one_line(c):>29}" for c in row.predicted)
        label = f"{row.label[:41]:<42}"
        lines.append(f"    {label} {row.observed:>16} {row.simulated:>16} {row.error:>17}{cells}")
    if plan.knee:
        lines += ["", paint("CONGESTION KNEE", "bold")]
        lines += [f"  {one_line(k.configuration)}: {pv.knee_sentence(k)}" for k in plan.knee]
    return "\n".join(lines) + "\n"
