"""The README's commands are the ones CI runs, its tables match the code, and it stays a short
page for users: the details live in docs/, every page linked from it, every link resolving."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvdiag.domain.exitcodes import ExitCode
from kvdiag.domain.records.diagnosis import IncidentClass

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text()
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MAX_README_LINES = 320
# Written separately; linked from the README before it exists.
PENDING = {DOCS / "python-api.md"}

LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def _shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def relative_links(text: str) -> list[str]:
    """The targets of the Markdown links in `text` that point into the repository
    (no scheme, no bare #anchor), without their anchors; code is not searched."""
    prose = CODE.sub("", FENCE.sub("", text))
    targets = []
    for target in LINK.findall(prose):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, flags=re.I) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def broken_links(page: Path) -> list[str]:
    missing = []
    for target in relative_links(page.read_text()):
        path = (page.parent / target).resolve()
        if not path.exists() and path not in PENDING:
            missing.append(target)
    return missing


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


def test_the_readme_is_a_short_page() -> None:
    lines = len(README.splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move details to docs/"


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", [README_PATH, *PAGES], ids=_name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / target).resolve() for target in relative_links(README)}
    assert PAGES, "docs/ holds no page"
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


def test_the_link_checks_see_links_and_skip_code(tmp_path: Path) -> None:
    text = (
        "[a](docs/a.md#x) [b](https://example.com) [c](#local) `[d](no.md)`\n"
        "```\n[e](nor.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md"]
    page = tmp_path / "page.md"
    page.write_text("[here](page.md) [gone](gone.md)\n")
    assert broken_links(page) == ["gone.md"]
