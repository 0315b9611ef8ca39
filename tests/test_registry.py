"""The rule registry is explicit, complete and well-formed; every class has its fixtures."""

from __future__ import annotations

from pathlib import Path

from kvdiag.analyzer.schema import TABLES_BY_NAME
from kvdiag.rules import RULES
from tests.conftest import fixture_cases, run_cli

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
            assert f"`{t.name}`" in (rule.__doc__ or "") or t.name in (rule.__doc__ or ""), (
                f"{rule.code}: threshold {t.name} is not explained in the docstring"
            )


def test_every_implied_class_has_a_fixture_and_a_near_miss() -> None:
    """A primary fixture (pending ones count: they turn green when their ingester lands)
    and a near miss that must not yield the class as primary."""
    cases = fixture_cases()
    for rule in RULES:
        if rule.implies is None:
            continue
        cls = rule.implies.value
        shown = [c.name for c in cases if c.expected.get("primary") == cls]
        assert shown, f"{rule.code}: no fixture has primary {cls}"
        near = [
            c.name
            for c in cases
            if cls in c.expected.get("near_miss_for", []) and c.expected.get("primary") != cls
        ]
        assert near, f"{rule.code}: no near-miss fixture for {cls}"


def test_rules_and_explain_list_every_rule_with_its_needs_and_thresholds() -> None:
    listing = run_cli("rules").stdout
    for rule in RULES:
        assert f"{rule.code} {rule.name}" in listing
        explained = run_cli("explain", rule.code)
        assert explained.exit_code == 0
        assert rule.summary() in explained.stdout
        for table in (*rule.requires, *rule.requires_any):
            assert table in explained.stdout
        for t in rule.thresholds:
            assert f"{rule.code}.{t.name} = {t.default:g}" in listing
            assert f"{rule.code}.{t.name} = {t.default:g}" in explained.stdout
    assert run_cli("explain", "KV999").exit_code == 2
    assert "KV301" in run_cli("explain", "peak.kv_saturation").stdout
