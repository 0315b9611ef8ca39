"""Exit codes: defined here once, listed in `--help` and the README."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What `kvdiag analyze` returns; when several apply, the highest wins."""

    OK = 0
    FINDINGS = 1
    USAGE = 2
    NO_INPUT = 3
    INTERNAL = 4
    NO_SPACE = 5
    INTERRUPTED = 130


EXIT_CODE_HELP: dict[ExitCode, str] = {
    ExitCode.OK: "analysis done, no finding at or above --fail-on",
    ExitCode.FINDINGS: "analysis done, findings at or above --fail-on",
    ExitCode.USAGE: "usage error (bad option or argument)",
    ExitCode.NO_INPUT: "incident folder missing, or nothing in it could be ingested",
    ExitCode.INTERNAL: "internal error; a rule crash still writes the report and lists the rule",
    ExitCode.NO_SPACE: "a disk kvdiag writes to is full (the database's under TMPDIR or at --db, "
    "or the report's); no partial file is left behind",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); no partial report or database is left behind",
}


def exit_code_table() -> str:
    """The exit-code table as plain text, for --help epilogs."""
    return "\n".join(f"  {int(code)}  {text}" for code, text in EXIT_CODE_HELP.items())
