"""Text from inputs stays text: XSS payloads in log lines, label values and file names are
inert in the HTML and Markdown, and terminal escapes never reach the terminal report."""

from __future__ import annotations

import html
import json
import re

import pytest

from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from kvdiag.reports import OutputFormat, render
from tests import hostile_incident
from tests.test_reports_html import Page
from tests.test_reports_markdown import MARKDOWN_TAGS, gfm

# Elements the HTML report is built from; an injected tag would be something else.
HTML_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "section", "div", "p",
    "span", "strong", "br", "dl", "dt", "dd", "ul", "ol", "li", "nav", "a", "table", "thead",
    "tbody", "tr", "th", "td", "article", "header", "footer", "code", "figure", "figcaption",
    "svg", "rect", "line", "polyline", "circle", "text",
}  # fmt: skip


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Diagnosis:
    folder = hostile_incident.build(tmp_path_factory.mktemp("xss"))
    return analyze(AnalyzeOptions(incident=folder)).diagnosis


def test_the_payloads_reach_the_diagnosis(hostile: Diagnosis) -> None:
    """Guard: the payloads really are in what the renderers get."""
    dumped = json.dumps(hostile.to_dict())
    assert (
        hostile_incident.LABEL_PAYLOAD
        in json.loads(dumped)["findings"][0]["evidence"][0]["excerpt"]
    )
    assert any(r.path == hostile_incident.JUNK_NAME for r in hostile.inputs)
    assert any(e.path == hostile_incident.LOG_NAME for f in hostile.findings for e in f.evidence)


def test_html_payloads_are_text(hostile: Diagnosis) -> None:
    text = render(hostile, OutputFormat.HTML)
    page = Page(text)
    assert {tag for tag, _ in page.elements} <= HTML_TAGS
    for tag, attrs in page.elements:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert tag != "a" or (attrs.get("href") or "").startswith("#")
    for payload in (*hostile_incident.VISIBLE, hostile_incident.LABEL_PAYLOAD):
        assert payload in page.text  # shown, as text
        assert payload not in text  # and only ever escaped in the source
    assert "\x1b" not in text and "\x07" not in text


def test_markdown_payloads_are_text(hostile: Diagnosis) -> None:
    text = render(hostile, OutputFormat.MARKDOWN)
    rendered = gfm(text)
    assert set(re.findall(r"<(\w+)", rendered)) <= MARKDOWN_TAGS
    visible = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    assert hostile_incident.LOG_NAME in visible
    assert hostile_incident.LABEL_PAYLOAD in visible


def test_terminal_report_has_no_input_escapes(hostile: Diagnosis) -> None:
    for color in (False, True):
        text = render(hostile, OutputFormat.TEXT, color=color)
        assert hostile_incident.LOG_NAME in text  # input text is there, its escapes are not
        assert '"><img src=x onerror=alert(7)>red.txt' in text
        assert "\x1b[31mred" not in text
