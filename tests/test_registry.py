"""The rule registry is explicit, complete and well-formed."""

from __future__ import annotations

from pathlib import Path

from kvdiag.analyzer.schema import TABLES_BY_NAME
from kvdiag.rules import RULES
from tests.conftest import fixture_cases

RULES_DIR = Path(__file__).resolve().parents[1] / "kvdiag" / "rules"


def test_codes_and_names_are_unique_and_sorted() -> None:
    codes = [r.code for r in RULES]
    assert codes == sorted(codes)
    assert len(set(codes)) == len(codes)
    assert len({r.name for r in RULES}) == len(RULES)


def test_every_rule_module_is_registered() -> None:
    modules = {p.stem for p in RULES_DIR.glob("kv[0-9]*.py")}
    registered = {r.__module__.rsplit(".", 1)[1] for r in RULES}
    assert modules == registered
    for rule in RULES:
        assert rule.__module__.rsplit(".", 1)[1].startswith(rule.code.lower()), rule


def test_rules_require_declared_tables_and_document_thresholds() -> None:
    for rule in RULES:
        for table in (*rule.requires, *rule.requires_any):
            assert table in TABLES_BY_NAME, (rule.code, table)
        for t in rule.thresholds:
            assert t.doc and t.unit, (rule.code, t.name)


def test_every_implied_class_has_a_fixture_showing_it() -> None:
    shown = {c.expected.get("primary") for c in fixture_cases() if "pending" not in c.expected}
    for rule in RULES:
        if rule.implies is not None:
            assert rule.implies.value in shown, (
                f"{rule.code}: no fixture has primary {rule.implies.value}"
            )
