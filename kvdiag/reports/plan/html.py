"""The self-contained HTML form of a plan: the analysis report's stylesheet and safety
(autoescape, no script, a Content-Security-Policy pinning the stylesheet)."""

from __future__ import annotations

from markupsafe import Markup

from kvdiag.domain.records.plan import Plan
from kvdiag.reports.html import _environment, content_security_policy, stylesheet
from kvdiag.reports.plan import view as pv


def render_plan_html(plan: Plan) -> str:
    css = stylesheet()
    context = {
        "p": plan,
        "css": Markup(css),  # our own stylesheet, shipped in the package: not input text
        "csp": content_security_policy(css),
        "tone": "ok" if plan.trusted else "warn",
        "trust": pv.trust_sentence(plan),
        "load": pv.load_sentence(plan),
        "flags": [pv.flags_text(s) for s in plan.scenarios],
        "rows": pv.rows(plan, plan.scenarios),
        "knees": [(k.configuration, pv.knee_sentence(k)) for k in plan.knee],
    }
    return str(_environment().get_template("plan.html.j2").render(context))
