"""The memory ledger's terms have one home, kvdiag/domain/ledger.py: the report's bars and the
findings' waterfall name, read and label every term from it."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from kvdiag.analyzer.model.quantities.ledger import Ledger, waterfall
from kvdiag.domain import ledger as domain
from kvdiag.domain.records.diagnosis import Fact, SourceRef
from kvdiag.reports.html import render_html, stylesheet
from tests.goldens import fixture_diagnosis

PKG = Path(__file__).resolve().parents[1] / "kvdiag"
HOME = PKG / "domain" / "ledger.py"
GIB = 2**30


def _spellings() -> dict[str, str]:
    """Every way a term is written (key, fact, either label) -> its key."""
    out: dict[str, str] = {}
    for term in domain.TERMS:
        for text in (term.key, term.fact, term.bar_label, term.finding_label):
            if text:
                out[text] = term.key
    return out


SPELLINGS = _spellings()


def _elements(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Dict):
        return [*(k for k in node.keys if k is not None), *node.values]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return list(node.elts)
    return []


def _terms_named(node: ast.AST) -> set[str]:
    """Terms a literal names in its elements or its rows' elements (a table's two levels)."""
    found = set()
    for element in _elements(node):
        for leaf in (element, *_elements(element)):
            if isinstance(leaf, ast.Constant) and leaf.value in SPELLINGS:
                found.add(SPELLINGS[leaf.value])
    return found


def term_tables(source: str) -> list[tuple[int, list[str]]]:
    """(line, terms) of every literal naming two terms or more: a table of ledger terms."""
    return [
        (getattr(node, "lineno", 0), sorted(named))
        for node in ast.walk(ast.parse(source))
        if len(named := _terms_named(node)) >= 2
    ]


def test_the_detector_sees_a_term_table_in_either_shape() -> None:
    # The shapes the two tables had before they moved to the domain.
    rows = 'T = (("weights", "weights", "weights_bytes"), ("graphs", "CUDA graphs", "x"))'
    labels = 'T = {"activation": "activation peak (profiling)", "unattributed": "not ..."}'
    assert term_tables(rows) == [(1, ["cuda_graph", "weights"])]
    assert term_tables(labels) == [(1, ["activation", "unattributed"])]
    assert term_tables('T = ("weights_gib", "free_gib", "KV cache")') == []


def test_no_module_but_the_domain_holds_a_table_of_ledger_terms() -> None:
    found = {
        path.relative_to(PKG).as_posix(): tables
        for path in sorted(PKG.rglob("*.py"))
        if path != HOME and (tables := term_tables(path.read_text()))
    }
    assert found == {}


@pytest.mark.parametrize("layer", ["rules", "reports"])
def test_rules_and_reports_spell_no_term_key_or_fact_themselves(layer: str) -> None:
    own = {t.key for t in domain.TERMS} | {t.fact for t in domain.TERMS if t.fact}
    spelled = [
        f"{path.relative_to(PKG)}:{node.lineno} {node.value!r}"
        for path in sorted((PKG / layer).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in own
    ]
    assert spelled == []


def test_term_keys_are_unique_and_the_card_terms_are_the_bars_order() -> None:
    keys = [t.key for t in domain.TERMS]
    assert len(keys) == len(set(keys))
    assert domain.TERMS[-1] is domain.UNATTRIBUTED and domain.UNATTRIBUTED.fact is None
    assert set(domain.BUDGET_TERMS) < set(domain.CARD_TERMS)


def _every_term_on_gpu_0() -> dict[str, Fact | tuple[Fact, ...]]:
    """Each card term's fact at 1..7 GiB on an 80 GiB card, 52 GiB left unattributed."""
    src = SourceRef("nvidia-smi.csv", 2)
    gpu = (("gpu", "0"),)
    facts: dict[str, Fact | tuple[Fact, ...]] = {
        domain.TOTAL_FACT: Fact(80 * GIB, "bytes", src, scope=gpu)
    }
    for size, term in enumerate(domain.CARD_TERMS, start=1):
        assert term.fact is not None
        facts[term.fact] = Fact(size * GIB, "bytes", src, scope=gpu)
    return facts


def test_the_report_draws_each_term_with_its_bar_label_and_a_styled_class() -> None:
    d = dataclasses.replace(fixture_diagnosis("vllm-a-healthy"), facts=_every_term_on_gpu_0())
    html = render_html(d)
    segments = re.findall(r'<rect class="seg (m-[\w-]+)"[^>]*><title>([^<:]+):', html)
    bars = [*domain.CARD_TERMS, domain.UNATTRIBUTED]
    assert [label for _, label in segments] == [t.bar_label for t in bars]
    legend = re.findall(r'<li><svg[^>]*><rect class="(m-[\w-]+)"[^>]*/></svg>([^<]+)</li>', html)
    assert legend == segments
    # Each class has a colour in the stylesheet (a class it lacks draws an unstyled bar).
    css = stylesheet()
    assert [cls for cls, _ in segments if f".{cls} {{" not in css] == []


def test_the_findings_waterfall_prints_each_term_with_its_finding_label() -> None:
    # Every budget term stated, the graphs inside the budget (0.20+), 5 GiB unattributed.
    case = Ledger(80.0, 0.9, 20.0, 14.0, 30.0, 1.0, 2.0)
    assert [key for key, _ in case.terms()] == [
        *(t.key for t in domain.BUDGET_TERMS),
        domain.UNATTRIBUTED.key,
    ]
    labels = [label for label, _ in waterfall(case)[2:]]
    expected = [t.finding_label for t in (*domain.BUDGET_TERMS, domain.UNATTRIBUTED)]
    assert labels == [*expected, domain.KV_POOL.finding_label]
