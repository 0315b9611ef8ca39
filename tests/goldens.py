"""Golden reports: every fixture rendered in every format, stamped with its inputs' hash.

`python -m tests.regen_goldens` rewrites them; tests/test_goldens.py compares. The stamp
(golden/stamp.json) holds a hash of the fixture's incident/ files, so a changed input with
stale goldens fails with the command to run, not with a confusing diff.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from kvdiag.compare import BeforeAfter, compare_paths
from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from kvdiag.reports import OutputFormat, render
from kvdiag.reports.comparison.render import render_compare
from tests.conftest import FIXTURES, FixtureCase, fixture_cases

REGEN_COMMAND = "python -m tests.regen_goldens"
STAMP = "stamp.json"
# golden file -> format; colour off, so the goldens are what a pipe would get.
FILES: dict[str, OutputFormat] = {
    "report.txt": OutputFormat.TEXT,
    "report.md": OutputFormat.MARKDOWN,
    "diagnosis.json": OutputFormat.JSON,
    "report.html": OutputFormat.HTML,
}


def golden_dir(case: FixtureCase) -> Path:
    return case.incident.parent / "golden"


def incident_hash(incident: Path) -> str:
    """sha256 over every file's relative path and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in incident.rglob("*") if p.is_file()):
        digest.update(path.relative_to(incident).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# A log without a year takes it from the file's modification time, which the reports
# state ("year 2026 from modification time of server.log (2026-11-29)"). A clone stamps
# files with the day it was made: the fixtures are pinned to the day the goldens were.
PINNED_MTIME = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()


def analyze_case(case: FixtureCase) -> Diagnosis:
    """A fresh analysis of a fixture, labelled with the fixture's name."""
    _pin_mtimes(case.incident)
    return analyze(AnalyzeOptions(incident=case.incident, label=case.name)).diagnosis


@cache
def fixture_diagnosis(name: str) -> Diagnosis:
    """One analysis per fixture per test session (records are frozen, so sharing is safe)."""
    (case,) = [c for c in fixture_cases() if c.name == name]
    return analyze_case(case)


def render_all(case: FixtureCase) -> dict[str, str]:
    """Every golden file's content, from a fresh analysis."""
    diagnosis = analyze_case(case)
    return {name: render(diagnosis, fmt, color=False) for name, fmt in FILES.items()}


def read_stamp(case: FixtureCase) -> dict[str, str] | None:
    path = golden_dir(case) / STAMP
    if not path.exists():
        return None
    stamp: dict[str, str] = json.loads(path.read_text())
    return stamp


def write_goldens(case: FixtureCase) -> list[Path]:
    """Regenerate one fixture's goldens and stamp; returns the files written."""
    folder = golden_dir(case)
    folder.mkdir(exist_ok=True)
    written = []
    for name, text in render_all(case).items():
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    stamp = {"incident_sha256": incident_hash(case.incident), "regenerate": REGEN_COMMAND}
    (folder / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return [*written, folder / STAMP]


# --- BEFORE/AFTER pairs (fixtures/pairs/<pair>/): `kvdiag compare` in every format ---------

PAIRS = FIXTURES / "pairs"
PAIR_FILES: dict[str, OutputFormat] = {
    "compare.txt": OutputFormat.TEXT,
    "compare.md": OutputFormat.MARKDOWN,
    "compare.json": OutputFormat.JSON,
    "compare.html": OutputFormat.HTML,
}


def pair_names() -> list[str]:
    return sorted(p.name for p in PAIRS.iterdir() if (p / "expected.toml").is_file())


def pair_expected(pair: str) -> dict[str, Any]:
    return tomllib.loads((PAIRS / pair / "expected.toml").read_text())


@cache
def compared_fixtures(before: str, after: str) -> BeforeAfter:
    """`kvdiag compare` of two fixtures, labelled with their names (once per session)."""
    sides = [FIXTURES / name / "incident" for name in (before, after)]
    for incident in sides:
        _pin_mtimes(incident)
    opts = AnalyzeOptions(incident=sides[0])
    return compare_paths(sides[0], sides[1], opts, labels=(before, after))


def _pin_mtimes(incident: Path) -> None:
    for path in incident.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mtime != PINNED_MTIME:
            os.utime(path, (PINNED_MTIME, PINNED_MTIME))


def render_pair(pair: str) -> dict[str, str]:
    want = pair_expected(pair)
    r = compared_fixtures(want["before"], want["after"])
    return {name: render_compare(r, fmt, color=False) for name, fmt in PAIR_FILES.items()}


def pair_stamp(pair: str) -> str:
    """The goldens' inputs: both fixtures' incident hashes and the pair's expected.toml."""
    want = pair_expected(pair)
    parts = [incident_hash(FIXTURES / want[side] / "incident") for side in ("before", "after")]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def write_pair_goldens(pair: str) -> list[Path]:
    folder = PAIRS / pair / "golden"
    folder.mkdir(exist_ok=True)
    written = []
    for name, text in render_pair(pair).items():
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    stamp = {"inputs_sha256": pair_stamp(pair), "regenerate": REGEN_COMMAND}
    (folder / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return [*written, folder / STAMP]
