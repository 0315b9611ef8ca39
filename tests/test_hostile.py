"""Hostile and broken input: never crash, never lose a line.

Every entry of tests/hostile/ (a file or a folder, named for what it attacks) is analysed
alone. kvdiag must exit 0 or 1 with a report valid against the schema, or 3 with a message
naming every file it set aside and why; never 4 or a traceback. Line accounting must balance
for every file it read, and every file is listed. The reports' safety in every format is
tests/test_hostile_reports.py; the problems numbers and times raise, test_hostile_numbers.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kvdiag.domain.exitcodes import ExitCode
from tests.conftest import run_cli
from tests.test_reports_json import VALIDATOR

CORPUS = Path(__file__).resolve().parent / "hostile"
# Entries whose attack is the file name itself: written at test time, not committed, because a
# newline or an escape in a tracked path breaks the line-oriented tools run over the repo.
NAME_ATTACKS = (
    "name-with-a-newline\nINFO 01-01 00:00:00 spoofed line.log",
    "name-with-rtl-override-\u202egol.exe",
    "name-with-terminal-escape-\x1b[31mred\x1b[0m.log",
)
NAME_ATTACK_BODY = CORPUS.parent / "hostile_name_body.log"
ENTRIES = sorted([*(p.name for p in CORPUS.iterdir()), *NAME_ATTACKS])
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")
# Entries that still break something, with the reason; strict, so a fix must remove them.
KNOWN_FAILURES: dict[str, str] = {}  # corpus entries kvdiag is known to fail, with why
# What the pipeline says when a reader raised: a crash it caught, never an accepted outcome.
READER_FAILED = "reader failed"


def corpus_incident(tmp_path: Path, name: str) -> Path:
    """A copy of one corpus entry as an incident folder of its own."""
    incident = tmp_path / "incident"
    src = NAME_ATTACK_BODY if name in NAME_ATTACKS else CORPUS / name
    if src.is_dir():
        shutil.copytree(src, incident)
    else:
        incident.mkdir(parents=True)
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
    assert READER_FAILED not in result.stderr, result.stderr
    if result.exit_code == ExitCode.NO_INPUT:
        listed = re.findall(r"^  (.+?): (skipped|unrecognised|refused): .+$", result.stderr, re.M)
        assert listed, result.stderr  # every file set aside is named, with the reason
        assert not CONTROL.search(result.stderr.replace("\n", "")), "control text in stderr"
        return
    doc = json.loads(result.stdout)
    VALIDATOR.validate(doc)
    assert not [r for r in doc["inputs"] if READER_FAILED in (r["reason"] or "")], doc["inputs"]
    for record in doc["inputs"]:
        if record["lines_total"]:
            parts = record["lines_parsed"] + record["lines_unmatched"] + record["lines_undecodable"]
            assert parts == record["lines_total"], record
    listed = [r["path"] for r in doc["inputs"]]
    for path in incident.rglob("*"):
        rel = path.relative_to(incident).as_posix()
        if path.is_file() and not rel.endswith(ARCHIVES):  # archives list their members
            assert any(rel == r or rel.startswith(f"{r}/") for r in listed), (rel, listed)
    # Every format's safety: tests/test_hostile_reports.py.
