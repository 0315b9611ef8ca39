"""Every fixture's reports equal their goldens, and the goldens match the current inputs.

Regenerate with `python -m tests.regen_goldens` (see tests/goldens.py).
"""

from __future__ import annotations

import difflib
import json
from functools import cache

import pytest

from kvdiag.reports import render
from tests.conftest import FIXTURES, FixtureCase, fixture_cases
from tests.goldens import (
    FILES,
    PAIR_FILES,
    REGEN_COMMAND,
    STAMP,
    fixture_diagnosis,
    golden_dir,
    incident_hash,
    pair_names,
    pair_stamp,
    read_stamp,
    render_pair,
)
from tests.goldens import PAIRS as PAIRS_DIR

CASES = fixture_cases()
IDS = [c.name for c in CASES]


@cache
def _rendered(name: str) -> dict[str, str]:
    diagnosis = fixture_diagnosis(name)
    return {file: render(diagnosis, fmt, color=False) for file, fmt in FILES.items()}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_goldens_are_stamped_with_the_current_inputs(case: FixtureCase) -> None:
    stamp = read_stamp(case)
    assert stamp is not None, f"{case.name} has no goldens: regenerate with `{REGEN_COMMAND}`"
    assert stamp["incident_sha256"] == incident_hash(case.incident), (
        f"{case.name}/incident changed since its goldens were written: "
        f"regenerate with `{REGEN_COMMAND} {case.name}` and review the diff"
    )


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_report_matches_golden(case: FixtureCase, name: str) -> None:
    path = golden_dir(case) / name
    assert path.exists(), f"{path} missing: regenerate with `{REGEN_COMMAND}`"
    golden, fresh = path.read_text(encoding="utf-8"), _rendered(case.name)[name]
    if fresh != golden:
        diff = difflib.unified_diff(
            golden.splitlines(), fresh.splitlines(), "golden", "now", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:40])
        pytest.fail(
            f"{case.name}/{name} differs from its golden. If the change is intended, "
            f"regenerate with `{REGEN_COMMAND} {case.name}`.\n{shown}"
        )


def test_goldens_have_no_wall_clock_or_absolute_path() -> None:
    """Goldens must not depend on when or where they were made."""
    for case in CASES:
        for name in FILES:
            text = (golden_dir(case) / name).read_text(encoding="utf-8")
            assert str(case.incident.parent.parent) not in text, (case.name, name)
            assert "\x1b[" not in text, (case.name, name)


PAIRS = pair_names()


@pytest.mark.parametrize("pair", PAIRS)
def test_pair_goldens_are_stamped_with_the_current_inputs(pair: str) -> None:
    path = PAIRS_DIR / pair / "golden" / STAMP
    assert path.exists(), f"pairs/{pair} has no goldens: regenerate with `{REGEN_COMMAND}`"
    stamp = json.loads(path.read_text())
    assert stamp["inputs_sha256"] == pair_stamp(pair), (
        f"an incident of pairs/{pair} changed since its goldens were written: regenerate "
        f"with `{REGEN_COMMAND} pairs/{pair}` and review the diff"
    )


@cache
def _pair_rendered(pair: str) -> dict[str, str]:
    return render_pair(pair)


@pytest.mark.parametrize("name", sorted(PAIR_FILES))
@pytest.mark.parametrize("pair", PAIRS)
def test_pair_report_matches_golden(pair: str, name: str) -> None:
    path = PAIRS_DIR / pair / "golden" / name
    assert path.exists(), f"{path} missing: regenerate with `{REGEN_COMMAND}`"
    golden, fresh = path.read_text(encoding="utf-8"), _pair_rendered(pair)[name]
    if fresh != golden:
        diff = difflib.unified_diff(
            golden.splitlines(), fresh.splitlines(), "golden", "now", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:40])
        pytest.fail(
            f"pairs/{pair}/{name} differs from its golden. If the change is intended, "
            f"regenerate with `{REGEN_COMMAND} pairs/{pair}`.\n{shown}"
        )
    assert str(FIXTURES.parent) not in golden, "a golden must not hold an absolute path"
