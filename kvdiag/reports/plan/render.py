"""The plan renderers: each output format is a view of the one Plan record."""

from __future__ import annotations

import json

from kvdiag.domain.records.plan import Plan
from kvdiag.reports import OutputFormat


def render_plan(plan: Plan, fmt: OutputFormat, *, color: bool = False) -> str:
    if fmt is OutputFormat.TEXT:
        from kvdiag.reports.plan.text import render_plan_text

        return render_plan_text(plan, color=color)
    if fmt is OutputFormat.JSON:
        return json.dumps(plan.to_dict(), indent=2, ensure_ascii=False) + "\n"
    if fmt is OutputFormat.MARKDOWN:
        from kvdiag.reports.plan.markdown import render_plan_markdown

        return render_plan_markdown(plan)
    if fmt is OutputFormat.HTML:
        from kvdiag.reports.plan.html import render_plan_html

        return render_plan_html(plan)
    raise AssertionError(f"unhandled format {fmt}")
