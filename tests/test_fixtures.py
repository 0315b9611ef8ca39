"""Every fixture folder meets its hand-written expected.toml."""

from __future__ import annotations

import pytest

from tests.conftest import FixtureCase, analyze_json, fixture_cases
from tests.rules.evidence import assert_evidence_points_at_real_lines

ALLOWED_KEYS = {
    "provenance",
    "primary",
    "classes",
    "codes",
    "exit_code",
    "evidence",
    "pending",
    "note",
    "near_miss_for",
}
CASES = fixture_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_has_a_valid_expected_toml(case: FixtureCase) -> None:
    assert case.expected, f"{case.name}: expected.toml is missing or empty"
    assert set(case.expected) <= ALLOWED_KEYS, set(case.expected) - ALLOWED_KEYS
    for key in ("provenance", "primary", "codes"):
        assert key in case.expected, f"{case.name}: expected.toml lacks {key!r}"
    assert case.incident.is_dir(), f"{case.name}: no incident/ folder"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_diagnosis_matches_expected(
    case: FixtureCase, request: pytest.FixtureRequest
) -> None:
    exp = case.expected
    if "pending" in exp:
        request.applymarker(pytest.mark.xfail(reason=exp["pending"], strict=True))
    code, doc = analyze_json(case.incident)
    assert doc["verdict"]["primary"] == exp["primary"], doc["verdict"]
    assert doc["verdict"]["primary"] not in exp.get("near_miss_for", [])
    assert set(exp.get("classes", [])) <= set(doc["verdict"]["classes"])
    assert sorted({f["code"] for f in doc["findings"]}) == sorted(exp["codes"])
    if "exit_code" in exp:
        assert code == exp["exit_code"]
    cited = {f"{e['path']}:{e['line']}" for f in doc["findings"] for e in f["evidence"]}
    assert set(exp.get("evidence", [])) <= cited, sorted(cited)
    assert_evidence_points_at_real_lines(case.incident, doc)
