"""The README's commands are the ones CI runs, and its tables match the code."""

from __future__ import annotations

import re
from pathlib import Path

from kvdiag.domain.exitcodes import ExitCode
from kvdiag.domain.records.diagnosis import IncidentClass

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    test_command = _shell_blocks()[1].strip()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines(), "README test command and .ci/run differ"


def test_readme_example_command_names_a_bundled_example() -> None:
    from kvdiag.cli.examples import EXAMPLES

    assert any(f"--example {name}" in _shell_blocks()[0] for name in EXAMPLES)


def test_readme_lists_every_exit_code_and_class() -> None:
    for code in ExitCode:
        assert re.search(rf"^\| {int(code)} \|", README, flags=re.M), code
    for cls in IncidentClass:
        assert f"`{cls.value}`" in README, cls
