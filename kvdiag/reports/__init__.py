"""Renderers: each output format is a view of the one Diagnosis record."""

from __future__ import annotations

import enum

from kvdiag.analyzer.model import Diagnosis


class OutputFormat(enum.StrEnum):
    """The formats `kvdiag analyze --format` offers."""

    TEXT = "text"
    JSON = "json"


def render(diagnosis: Diagnosis, fmt: OutputFormat, *, color: bool = False) -> str:
    """The diagnosis in one format, as text ready to print or write."""
    if fmt is OutputFormat.TEXT:
        from kvdiag.reports.text import render_text

        return render_text(diagnosis, color=color)
    if fmt is OutputFormat.JSON:
        from kvdiag.reports.json_report import render_json

        return render_json(diagnosis)
    raise AssertionError(f"unhandled format {fmt}")
