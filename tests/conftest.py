"""Shared test helpers: fixture discovery, the ../shared real-data folder, CLI running."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, settings

from kvdiag.cli.main import cli

# Property tests (tests/test_properties*.py): a quick profile for CI, and
# `pytest --hypothesis-profile=deep tests/test_properties*.py` for 10,000 cases per parser.
_SLOW_OK = (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much)
settings.register_profile("ci", max_examples=40, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile(
    "deep", max_examples=10_000, deadline=None, suppress_health_check=_SLOW_OK, print_blob=True
)
settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
assert FIXTURES.is_dir(), FIXTURES
SHARED = Path(os.environ.get("KVDIAG_SHARED", ROOT.parent / "shared"))
REALDATA = SHARED / "realdata"


def shared(*parts: str) -> Path:
    """A path under ../shared, or skip the test when the folder is not there (CI clones)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} absent: ../shared real data is only on development machines")
    return path


@dataclass(frozen=True)
class FixtureCase:
    name: str
    incident: Path
    expected: dict[str, Any]


def fixture_cases() -> list[FixtureCase]:
    cases = []
    # fixtures/pairs holds BEFORE/AFTER pairs of the incidents here (tests/test_compare_pairs.py);
    # fixtures/ladder, fragments of a few lines per rung (tests/test_ladder_pressure.py).
    grouped = ("pairs", "ladder", "pastes")
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name not in grouped):
        expected_file = folder / "expected.toml"
        expected = tomllib.loads(expected_file.read_text()) if expected_file.exists() else {}
        cases.append(FixtureCase(folder.name, folder / "incident", expected))
    return cases


def run_cli(*args: str) -> Result:
    """Invoke the CLI in-process; colour off, as a pipe would be."""
    runner = CliRunner()
    return runner.invoke(cli, list(args), env={"NO_COLOR": "1"}, catch_exceptions=False)


def analyze_json(incident: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("analyze", str(incident), "--format", "json", "-q", *extra)
    return result.exit_code, json.loads(result.stdout)
