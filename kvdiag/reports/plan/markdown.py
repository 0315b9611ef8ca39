"""The Markdown form of a plan, for a ticket or a capacity review."""

from __future__ import annotations

from kvdiag.domain.records.plan import Plan
from kvdiag.reports.markdown import md_code, md_text, table
from kvdiag.reports.plan import view as pv


def render_plan_markdown(plan: Plan) -> str:
    header = ["quantity", "observed", "baseline (simulated)", "baseline error"]
    header += [f"#{i}" for i in range(1, len(plan.scenarios) + 1)]
    lines = [
        f"# kvdiag plan: {md_text(plan.incident)}",
        "",
        f"- load: {md_text(pv.load_sentence(plan))}",
        f"- step model: {md_text(plan.step.source)}, {plan.step.windows} windows",
        f"- {md_text(pv.trust_sentence(plan))}",
        *(f"- {md_text(n)}" for n in plan.notes),
        "",
        "## Scenarios",
        "",
        *(
            f"{i}. **{md_text(s.name)}** {md_code(pv.flags_text(s))}: "
            + ("clears the queue" if s.clears_queue else "the queue remains")
            + (f" ({md_text(s.note)})" if s.note else "")
            for i, s in enumerate(plan.scenarios, 1)
        ),
        "",
        "## Predictions",
        "",
        *table(
            header,
            (
                (
                    md_text(r.label),
                    md_text(r.observed),
                    md_text(r.simulated),
                    md_text(r.error),
                    *(md_text(c) for c in r.predicted),
                )
                for r in pv.rows(plan, plan.scenarios)
            ),
        ),
        *(["## Congestion knee", ""] if plan.knee else []),
        *(f"- {md_text(k.configuration)}: {md_text(pv.knee_sentence(k))}" for k in plan.knee),
        *([""] if plan.knee else []),
        f"_kvdiag {md_text(plan.kvdiag_version)}, plan schema {plan.schema_version}_",
    ]
    return "\n".join(lines) + "\n"
