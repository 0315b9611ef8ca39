"""Every corpus entry's report, in every format, keeps input text inert.

HTML: only the report's own elements and attributes (those its templates write), no event
handler, no link leaving the page, no `<script`; what the input said is shown as text.
Markdown: GitHub renders no HTML from it and every table row keeps its cells. Terminal: no
control character, no bidi override, no input text starting a line of its own. JSON: valid
against the schema.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from kvdiag.domain.errors import NoInputError
from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from kvdiag.reports import OutputFormat, render
from tests.test_hostile import ENTRIES, corpus_incident
from tests.test_reports_escaping import HTML_TAGS
from tests.test_reports_html import Page
from tests.test_reports_json import VALIDATOR
from tests.test_reports_markdown import MARKDOWN_TAGS, gfm

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What the corpus puts in file names and lines to start a line of its own or run code.
SGR = re.compile(r"\x1b\[[0-9;]*m")
SPOOFED_LINE = re.compile(r"^INFO 01-01 00:00:00 spoofed", re.MULTILINE)


@cache
def template_attributes() -> frozenset[str]:
    """Attribute names the report's own templates can write."""
    templates = Path(render.__code__.co_filename).parent / "templates"
    text = "".join(p.read_text() for p in templates.glob("*.j2"))
    names = frozenset(n.lower() for n in re.findall(r"\s([a-zA-Z][\w-]*)=\"", text))
    assert {"class", "href", "cx"} <= names  # guard: the templates were read
    return names


def _diagnosis(tmp_path: Path, name: str) -> Diagnosis | None:
    try:
        return analyze(AnalyzeOptions(incident=corpus_incident(tmp_path, name))).diagnosis
    except NoInputError:
        return None  # exit 3: nothing rendered (tests/test_hostile.py checks the message)


def check_html(text: str) -> None:
    page = Page(text)
    allowed = template_attributes()
    for tag, attrs in page.elements:
        assert tag in HTML_TAGS, tag
        assert set(attrs) <= allowed, (tag, attrs)
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        href = attrs.get("href")
        assert href is None or href.startswith("#"), (tag, attrs)
    lowered = text.lower()
    assert "<script" not in lowered and "javascript:" not in lowered
    assert "\x1b" not in text and "\x07" not in text


def check_markdown(text: str) -> None:
    rendered = gfm(text)
    assert set(re.findall(r"<(\w+)", rendered)) <= MARKDOWN_TAGS
    for table in re.findall(r"<table>.*?</table>", rendered, re.S):
        widths = {
            len(re.findall(r"<t[hd][ >]", row)) for row in re.findall(r"<tr>.*?</tr>", table, re.S)
        }
        assert len(widths) == 1, f"a row lost or gained cells: {widths}"


def check_terminal(text: str) -> None:
    assert not CONTROL.search(text), "control characters reached the terminal report"
    assert not SPOOFED_LINE.search(text), "input text started a line of the terminal report"


@pytest.mark.parametrize("name", ENTRIES)
def test_every_format_keeps_input_text_inert(tmp_path: Path, name: str) -> None:
    d = _diagnosis(tmp_path, name)
    if d is None:
        return
    check_html(render(d, OutputFormat.HTML))
    check_markdown(render(d, OutputFormat.MARKDOWN))
    check_terminal(render(d, OutputFormat.TEXT))
    check_terminal(SGR.sub("", render(d, OutputFormat.TEXT, color=True)))  # its own colours
    VALIDATOR.validate(json.loads(render(d, OutputFormat.JSON)))


def test_hostile_names_are_shown_as_text(tmp_path: Path) -> None:
    """Guard: the payloads in file names reach the reports, as text."""
    name = next(e for e in ENTRIES if e.startswith("xss-<img"))
    d = _diagnosis(tmp_path, name)
    assert d is not None
    page = Page(render(d, OutputFormat.HTML))
    assert "onerror=alert(1)" in page.text
    newline = next(e for e in ENTRIES if "\n" in e)
    d = _diagnosis(tmp_path / "n", newline)
    assert d is not None
    text = render(d, OutputFormat.TEXT)
    assert "name-with-a-newline⏎INFO 01-01 00:00:00 spoofed line.log" in text
