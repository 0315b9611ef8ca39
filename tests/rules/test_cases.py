"""Every rule against its cases: rows as the real inputs produce them, positives and near misses."""

from __future__ import annotations

import pytest

from kvdiag.rules import RULES
from tests.rules.casefile import CASES_DIR, RuleCase, load_cases, run_case

CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_case(case: RuleCase) -> None:
    spec = case.spec
    result = run_case(case)
    (run,) = result.runs
    assert not result.problems, result.problems
    if "skipped" in spec:
        assert run.status == "skipped" and spec["skipped"] in run.reason, run
        return
    assert run.status == "ran", run
    codes = sorted({f.code for f in result.findings})
    assert codes == sorted(spec["expect"]), [f.title for f in result.findings]
    titles = " | ".join(f.title for f in result.findings)
    for part in spec.get("title", []):
        assert part in titles, titles
    if "severity" in spec:
        assert {f.severity.value for f in result.findings} == {spec["severity"]}
    remedies = " | ".join(
        f"{r.action} {r.rationale}" for f in result.findings for r in f.remediation
    )
    for part in spec.get("remedies", []):
        assert part in remedies, remedies
    reasons = " | ".join(r.reason for r in result.ruled_out)
    for part in spec.get("ruled_out", []):
        assert part in reasons, reasons
    quantities = " | ".join(c.quantity for _, c in result.comparisons)
    for part in spec.get("comparisons", []):
        assert part in quantities, quantities
    for finding in result.findings:
        assert finding.evidence, f"{finding.code}: a finding without evidence"
        for ev in finding.evidence:
            assert ev.path and ev.line, ev


def test_every_rule_has_a_positive_and_a_near_miss_case() -> None:
    for rule in RULES:
        mine = [c for c in CASES if c.code == rule.code]
        assert (CASES_DIR / f"{rule.code}.toml").exists(), rule.code
        assert any(rule.code in c.spec.get("expect", []) for c in mine), f"{rule.code}: no positive"
        assert any(c.spec.get("expect") == [] and "skipped" not in c.spec for c in mine), (
            f"{rule.code}: no near miss"
        )
