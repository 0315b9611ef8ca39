"""The compare renderers: each output format is a view of the one BeforeAfter record."""

from __future__ import annotations

from kvdiag.domain.records.comparison import BeforeAfter
from kvdiag.reports import OutputFormat


def render_compare(r: BeforeAfter, fmt: OutputFormat, *, color: bool = False) -> str:
    """The comparison in one format, as text ready to print or write."""
    if fmt is OutputFormat.TEXT:
        from kvdiag.reports.comparison.text import render_compare_text

        return render_compare_text(r, color=color)
    if fmt is OutputFormat.JSON:
        from kvdiag.reports.comparison.json_report import render_compare_json

        return render_compare_json(r)
    if fmt is OutputFormat.HTML:
        from kvdiag.reports.comparison.html import render_compare_html

        return render_compare_html(r)
    if fmt is OutputFormat.MARKDOWN:
        from kvdiag.reports.comparison.markdown import render_compare_markdown

        return render_compare_markdown(r)
    raise AssertionError(f"unhandled format {fmt}")
