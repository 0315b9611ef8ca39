"""One error hierarchy. Input errors carry where they happened."""

from __future__ import annotations

from kvdiag.analyzer.exitcodes import ExitCode


class KvdiagError(Exception):
    """Base of every error kvdiag raises on purpose."""

    exit_code: ExitCode = ExitCode.INTERNAL


class NoInputError(KvdiagError):
    """The incident folder is missing, or nothing in it could be ingested."""

    exit_code = ExitCode.NO_INPUT


class NoSpaceError(KvdiagError):
    """The disk holding the database (scratch under TMPDIR, or --db) is full.

    Not the input's fault, nor a bug: the run stops there, instead of going on with each
    remaining input "skipped" for the same reason and a report short of them.
    """

    exit_code = ExitCode.NO_SPACE


class FormatPackError(KvdiagError):
    """A format pack (TOML) is malformed: names the file, the key and what is wrong."""
