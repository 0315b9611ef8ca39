"""Renderers: each output format is a view of the one Diagnosis record."""

from __future__ import annotations

import enum

from kvdiag.domain.records.diagnosis import Diagnosis


class OutputFormat(enum.StrEnum):
    """The formats `kvdiag analyze --format` offers."""

    TEXT = "text"
    JSON = "json"
    HTML = "html"
    MARKDOWN = "markdown"


def render(diagnosis: Diagnosis, fmt: OutputFormat, *, color: bool = False) -> str:
    """The diagnosis in one format, as text ready to print or write."""
    if fmt is OutputFormat.TEXT:
        from kvdiag.reports.text import render_text

        return render_text(diagnosis, color=color)
    if fmt is OutputFormat.JSON:
        from kvdiag.reports.json_report import render_json

        return render_json(diagnosis)
    if fmt is OutputFormat.HTML:
        from kvdiag.reports.html import render_html

        return render_html(diagnosis)
    if fmt is OutputFormat.MARKDOWN:
        from kvdiag.reports.markdown import render_markdown

        return render_markdown(diagnosis)
    raise AssertionError(f"unhandled format {fmt}")
