"""Hostile and broken input: never crash, never lose a line, never let control text through.

Every entry of tests/hostile/ (a file or a folder, named for what it attacks) is analysed
alone. kvdiag must exit 0, 1 or 3 with a report, never 4 or a traceback; line accounting
must balance for every file it read; no terminal control character may reach the report.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kvdiag.analyzer.exitcodes import ExitCode
from tests.conftest import run_cli

CORPUS = Path(__file__).resolve().parent / "hostile"
ENTRIES = sorted(p.name for p in CORPUS.iterdir())
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Entries that still break something, with the reason; strict, so a fix must remove them.
KNOWN_FAILURES: dict[str, str] = {}


def corpus_incident(tmp_path: Path, name: str) -> Path:
    """A copy of one corpus entry as an incident folder of its own."""
    incident = tmp_path / "incident"
    src = CORPUS / name
    if src.is_dir():
        shutil.copytree(src, incident)
    else:
        incident.mkdir()
        shutil.copy2(src, incident / name)
    return incident


def test_corpus_is_large_enough() -> None:
    assert len(ENTRIES) >= 40


@pytest.mark.parametrize("name", ENTRIES)
def test_hostile_input_is_survived_and_accounted(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if name in KNOWN_FAILURES:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_FAILURES[name], strict=True))
    incident = corpus_incident(tmp_path, name)
    result = run_cli("analyze", str(incident), "--format", "json", "-q")
    assert result.exit_code in (ExitCode.OK, ExitCode.FINDINGS, ExitCode.NO_INPUT), result.output
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.exit_code == ExitCode.NO_INPUT:
        return
    doc = json.loads(result.stdout)
    for record in doc["inputs"]:
        if record["lines_total"]:
            parts = record["lines_parsed"] + record["lines_unmatched"] + record["lines_undecodable"]
            assert parts == record["lines_total"], record
    text = run_cli("analyze", str(incident), "-q").stdout
    assert not CONTROL.search(text.replace("\n", "")), (
        "control characters reached the terminal report"
    )
