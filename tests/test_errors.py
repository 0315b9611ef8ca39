"""One error hierarchy: every exception kvdiag defines derives from KvdiagError, and each
ends a run with its documented exit code and its message.

errors.py is part of the ground floor (kvdiag.domain), so every layer, the domain's own
arithmetic included, raises from the one hierarchy. Any other exception that escapes is a
bug and ends the run as an internal error, exit code 4.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvdiag import pipeline, rules
from kvdiag.analyzer.discovery import archive
from kvdiag.cli import main as cli_main
from kvdiag.domain import errors
from kvdiag.domain.errors import ArchiveLimitError, InputError, KvdiagError
from kvdiag.domain.exitcodes import EXIT_CODE_HELP, ExitCode
from tests.conftest import FIXTURES, run_cli
from tests.introspect import classes_defined_in, modules_under

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"


def exceptions_defined() -> list[type[BaseException]]:
    return classes_defined_in(modules_under("kvdiag"), BaseException)


def outside_the_hierarchy(classes: list[type[BaseException]]) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, KvdiagError)]


ERRORS = exceptions_defined()
KVDIAG_ERRORS = [e for e in ERRORS if issubclass(e, KvdiagError)]


def test_every_exception_kvdiag_defines_derives_from_kvdiag_error() -> None:
    assert ArchiveLimitError in ERRORS  # the walk sees the modules' own classes
    assert outside_the_hierarchy(ERRORS) == []


def test_the_hierarchy_drawn_in_errors_py_names_every_error() -> None:
    drawn = errors.__doc__ or ""
    assert [e.__name__ for e in KVDIAG_ERRORS if not re.search(rf"\b{e.__name__}\b", drawn)] == []


def test_the_check_catches_an_exception_outside_the_hierarchy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What ArchiveLimitError was: a plain Exception of the archive module.
    stray = type("StrayError", (Exception,), {"__module__": archive.__name__})
    monkeypatch.setattr(archive, "StrayError", stray, raising=False)
    assert outside_the_hierarchy(exceptions_defined()) == [f"{archive.__name__}.StrayError"]


@pytest.mark.parametrize("error", KVDIAG_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_ends_the_run_with_its_documented_code_and_message(
    error: type[KvdiagError], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert isinstance(error.exit_code, ExitCode) and error.exit_code in EXIT_CODE_HELP
    assert error.exit_code not in (ExitCode.OK, ExitCode.FINDINGS)

    def fail(*args: object) -> None:
        raise error("it broke \x1b]0;title\x07here")  # a message quoting hostile input

    # Raised during `analyze`, which reports it itself (the command imports the pipeline
    # when it runs, so the pipeline's own name is the one to replace) ...
    monkeypatch.setattr(pipeline, "analyze", fail)
    result = run_cli("analyze", str(SATURATION))
    assert (result.exit_code, result.stderr) == (error.exit_code, "kvdiag: it broke here\n")
    # ... and by a command that does not: main() reports it the same way.
    monkeypatch.setattr(rules, "get_rule", fail)
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["explain", "KV301"])
    assert exited.value.code == error.exit_code
    assert capsys.readouterr().err == "kvdiag: it broke here\n"


@pytest.mark.parametrize("error", [ValueError, KeyError], ids=lambda cls: cls.__name__)
def test_an_exception_outside_the_hierarchy_that_escapes_is_an_internal_error(
    error: type[Exception], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(*args: object) -> None:
        raise error("no size for it")

    monkeypatch.setattr(pipeline, "analyze", fail)
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["analyze", str(SATURATION)])
    assert exited.value.code == ExitCode.INTERNAL
    assert capsys.readouterr().err.startswith(
        f"kvdiag: internal error: {error.__name__}('no size for it')"
    )


def test_an_input_error_says_where_it_happened() -> None:
    assert str(InputError("not JSON", path="m/config.json", line=3)) == "m/config.json:3: not JSON"
    assert str(InputError("no such file", path=Path("incident"))) == "incident: no such file"
    assert str(InputError("the server is down")) == "the server is down"
    located = ArchiveLimitError("expands beyond 10 bytes", path="a.tgz!big.log")
    assert (located.path, located.line, located.message) == (
        "a.tgz!big.log",
        None,
        "expands beyond 10 bytes",
    )
    assert located.exit_code == ExitCode.NO_INPUT


def test_a_missing_incident_is_named_with_exit_code_3(tmp_path: Path) -> None:
    result = run_cli("analyze", str(tmp_path / "nope"))
    assert result.exit_code == ExitCode.NO_INPUT
    assert result.stderr == f"kvdiag: {tmp_path / 'nope'}: no such file or folder\n"
