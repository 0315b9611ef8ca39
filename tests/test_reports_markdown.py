"""The Markdown report renders as GFM tables (checked with cmark-gfm, GitHub's own parser)
and input text stays literal text whatever it holds."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import cmarkgfm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.domain.records.diagnosis import Extent, Finding, IncidentClass, Severity
from kvdiag.domain.safe_text import plain
from kvdiag.reports import view
from kvdiag.reports.markdown import md_code, md_text, render_markdown
from tests.conftest import fixture_cases
from tests.goldens import fixture_diagnosis

CASES = [c.name for c in fixture_cases()]
# Tags cmark-gfm produces from Markdown constructs; anything else came from raw HTML.
MARKDOWN_TAGS = {
    "h2", "h3", "p", "strong", "em", "ul", "ol", "li", "code", "table", "thead", "tbody",
    "tr", "th", "td",
}  # fmt: skip


def gfm(text: str) -> str:
    """GitHub's rendering, with raw HTML let through so that a leak would show."""
    options = cmarkgfm.cmark.Options.CMARK_OPT_UNSAFE
    return cmarkgfm.github_flavored_markdown_to_html(text, options=options)


def _tables(rendered: str) -> list[list[list[str]]]:
    """Each table as rows of cells (header row first)."""
    tables = []
    for body in re.findall(r"<table>(.*?)</table>", rendered, flags=re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)
        tables.append([re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, flags=re.S) for r in rows])
    return tables


@pytest.mark.parametrize("name", CASES)
def test_markdown_renders_tables_and_no_raw_html(name: str) -> None:
    d = fixture_diagnosis(name)
    rendered = gfm(render_markdown(d))
    assert set(re.findall(r"<(\w+)", rendered)) <= MARKDOWN_TAGS
    tables = _tables(rendered)
    reconciliation = tables[0]
    assert reconciliation[0] == ["Layer", "Quantity", "Expected", "Observed", "Gap", "Conclusion"]
    # One row per comparison, at least one per layer (a layer with none says so).
    expected_rows = sum(max(1, len(layer.rows)) for layer in view.reconciliation(d))
    assert len(reconciliation) == 1 + expected_rows
    assert all(len(row) == 6 for row in reconciliation)
    if d.fleet:  # the fleet table follows the reconciliation: one row per replica listed
        fleet = tables[1]
        assert fleet[0][:2] == ["Replica", "Verdict"]
        assert [row[0].removeprefix("hot: ") for row in fleet[1:]] == [
            r.replica for r in d.fleet[:10]
        ]
        tables = tables[1:]
    evidence_tables = tables[1:]
    assert len(evidence_tables) == sum(1 for f in d.findings[:5] if f.evidence)
    for table, finding in zip(evidence_tables, d.findings, strict=False):
        assert all(len(row) == 5 for row in table)
        cited = [html.unescape(re.sub(r"</?code>", "", row[0])) for row in table[1:]]
        assert cited == [f"{e.path}:{e.line}" for e in finding.evidence[:5]]


@pytest.mark.parametrize("name", CASES)
def test_markdown_table_lines_are_well_formed(name: str) -> None:
    """The GFM syntax itself: every row has the header's number of unescaped pipes."""
    text = render_markdown(fixture_diagnosis(name))
    blocks = re.findall(r"(?:^\|.*\|$\n?)+", text, flags=re.M)
    assert blocks
    for block in blocks:
        lines = block.strip("\n").split("\n")
        assert re.fullmatch(r"\|( (---|---:) \|)+", lines[1]), lines[1]
        counts = {len(re.findall(r"(?<!\\)\|", line)) for line in lines}
        assert len(counts) == 1, lines


def test_verdict_and_remedies_present() -> None:
    d = fixture_diagnosis("vllm-b-saturation")
    rendered = html.unescape(gfm(render_markdown(d)))
    assert "Saturation (confidence high)" in rendered
    assert d.verdict.summary in rendered
    for finding in d.findings:
        for remedy in finding.remediation:
            assert remedy.action in rendered and remedy.rationale in rendered


_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")), max_size=60
)


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", plain(s)).strip()


@settings(max_examples=400, deadline=None)
@given(_text)
def test_md_text_stays_literal_text_in_a_paragraph(s: str) -> None:
    rendered = gfm("x " + md_text(s))
    assert set(re.findall(r"<(\w+)", rendered)) <= {"p"}
    inner = re.sub(r"^<p>|</p>\n$", "", rendered)
    assert _squash(html.unescape(inner)) == _squash("x " + s)


@settings(max_examples=400, deadline=None)
@given(_text, _text)
def test_table_cells_hold_any_text(a: str, b: str) -> None:
    rendered = gfm(f"| h1 | h2 |\n| --- | --- |\n| {md_text(a)} | {md_code(b, limit=999)} |\n")
    ((_, row),) = _tables(rendered)
    assert len(row) == 2
    assert set(re.findall(r"<(\w+)", rendered)) <= MARKDOWN_TAGS
    assert _squash(html.unescape(row[0])) == _squash(a)
    code = re.sub(r"^<code>|</code>$", "", row[1])
    assert _squash(html.unescape(code)) == _squash(b)


def test_a_finding_says_how_long_its_condition_held_and_whether_it_claims_its_class() -> None:
    """What the verdict's confidence weighed shows beside the finding in every report."""
    f = Finding("KV301", "x", 3, Severity.ERROR, "t", (), implies=IncidentClass.SATURATION)
    assert view.finding_scope(f) == ""
    assert view.finding_scope(replace(f, extent=Extent(1, None))) == "seen once"
    assert (
        view.finding_scope(replace(f, extent=Extent(77, 138.0))) == "seen 77 times over 2 min 18 s"
    )
    assert (
        view.finding_scope(replace(f, extent=Extent(3, None)))
        == "seen 3 times (no times to span them)"
    )
    unclaimed = replace(f, claimed=False, severity=Severity.INFO)
    assert view.finding_scope(unclaimed).startswith("saturation not claimed")
    saturated = fixture_diagnosis("vllm-b-saturation")
    kv301 = next(x for x in saturated.findings if x.code == "KV301")
    assert view.finding_scope(kv301) in render_markdown(saturated)
