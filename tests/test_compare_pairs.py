"""`kvdiag compare` on real BEFORE/AFTER recordings: each pair gets the outcome its recording
shows (fixtures/pairs/*/expected.toml, written from the recordings' numbers), names the
setting that changed, and a fixed pair swapped is a regression."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kvdiag.compare import BeforeAfter, Outcome
from tests.conftest import FIXTURES, run_cli
from tests.goldens import compared_fixtures

PAIRS = FIXTURES / "pairs"
CASES = sorted(p.name for p in PAIRS.iterdir() if (p / "expected.toml").exists())


def expected(pair: str) -> dict[str, Any]:
    return tomllib.loads((PAIRS / pair / "expected.toml").read_text())


def incident(name: str) -> Path:
    return FIXTURES / name / "incident"


def compared(before: str, after: str) -> BeforeAfter:
    return compared_fixtures(before, after)  # one comparison per pair per test session


def test_pairs_are_found() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize("pair", CASES)
def test_pair_gets_the_outcome_its_recording_shows(pair: str) -> None:
    want = expected(pair)
    r = compared(want["before"], want["after"])
    assert r.outcome.value == want["outcome"], r.summary
    assert r.summary.startswith(f"{want['outcome']}:")
    assert r.load.comparable
    assert r.load.same_load is want["same_load"], r.load.notes


@pytest.mark.parametrize("pair", CASES)
def test_pair_names_the_setting_that_changed(pair: str) -> None:
    want = expected(pair)
    r = compared(want["before"], want["after"])
    changed = {c.setting for c in r.changes}
    assert set(want["changed"]) <= changed
    if not want["changed"]:
        assert changed == set(), "a run compared with itself changed nothing"
    for key in want["changed"]:
        change = next(c for c in r.changes if c.setting == key)
        assert change.before != change.after
        assert change.source_before and change.source_after  # where each value came from
        assert (change.flag or key) in r.summary  # the sentence names the explaining change


@pytest.mark.parametrize("pair", [p for p in CASES if "swapped" in expected(p)])
def test_a_pair_swapped_gets_the_opposite(pair: str) -> None:
    want = expected(pair)
    r = compared(want["after"], want["before"])
    assert r.outcome.value == want["swapped"], r.summary
    assert r.outcome is Outcome.REGRESSED or want["swapped"] != "regressed"


def test_remedies_of_before_are_checked_against_after() -> None:
    r = compared("vllm-c-prefill-peak-noprefix", "vllm-c2-prefill-peak-prefix")
    prefix = next(x for x in r.remedies if x.setting == "enable_prefix_caching")
    assert prefix.applied is True
    assert (prefix.before, prefix.after) == ("False", "True")
    assert "prefill_peak is gone" in prefix.effect
    prose = [x for x in r.remedies if x.setting is None]
    assert prose and all(x.applied is None for x in prose)


def test_block_size_remedy_moved_the_proposed_way_says_how_far() -> None:
    r = compared("vllm-h-padding-waste", "vllm-h2-padding-block32")
    block = next(x for x in r.remedies if x.setting == "block_size")
    assert (block.proposed, block.before, block.after, block.applied) == ("16", "128", "32", True)
    assert block.effect.startswith("32 where 16 was proposed")


def test_cli_exit_codes_and_json_contract(tmp_path: Path) -> None:
    before, after = (
        incident("vllm-c-prefill-peak-noprefix"),
        incident("vllm-c2-prefill-peak-prefix"),
    )
    fixed = run_cli("compare", str(before), str(after), "-f", "json", "-q")
    assert fixed.exit_code == 0
    doc = json.loads(fixed.stdout)
    for key in ("schema_version", "kvdiag_version", "before", "after", "load", "changes"):
        assert key in doc
    for key in ("layers", "remedies", "outcome", "summary"):
        assert key in doc
    assert set(doc["before"]) >= {"verdict", "facts", "inputs"}
    assert set(doc["load"]) >= {"comparable", "quantities", "notes"}
    assert doc["outcome"] == "fixed"
    regressed = run_cli("compare", str(after), str(before), "-q")
    assert regressed.exit_code == 1
    assert "regressed" in regressed.stdout
    never = run_cli("compare", str(after), str(before), "-q", "--fail-on", "never")
    assert never.exit_code == 0


def test_a_missing_side_exits_3(tmp_path: Path) -> None:
    result = run_cli("compare", str(incident("vllm-a-healthy")), str(tmp_path / "absent"), "-q")
    assert result.exit_code == 3


def test_a_kept_database_is_a_side(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    kept = run_cli("analyze", str(incident("vllm-c-prefill-peak-noprefix")), "--db", str(db), "-q")
    assert kept.exit_code == 0 and db.is_file()
    after = incident("vllm-c2-prefill-peak-prefix")
    result = run_cli("compare", str(db), str(after), "-f", "json", "-q")
    doc = json.loads(result.stdout)
    direct = compared("vllm-c-prefill-peak-noprefix", "vllm-c2-prefill-peak-prefix")
    assert doc["outcome"] == direct.outcome.value
    assert doc["before"]["verdict"]["primary"] == direct.before.diagnosis.verdict.primary.value
    assert [c["setting"] for c in doc["changes"]] == [c.setting for c in direct.changes]


def test_a_file_that_is_not_a_kept_database_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "x.duckdb"
    fake.write_bytes(b"\0" * 8 + b"DUCK" + b"\0" * 100)
    result = run_cli("compare", str(fake), str(incident("vllm-a-healthy")), "-q")
    assert result.exit_code == 3
