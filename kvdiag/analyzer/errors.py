"""One error hierarchy. Input errors carry where they happened."""

from __future__ import annotations

from kvdiag.analyzer.exitcodes import ExitCode


class KvdiagError(Exception):
    """Base of every error kvdiag raises on purpose."""

    exit_code: ExitCode = ExitCode.INTERNAL


class NoInputError(KvdiagError):
    """The incident folder is missing, or nothing in it could be ingested."""

    exit_code = ExitCode.NO_INPUT


class FormatPackError(KvdiagError):
    """A format pack (TOML) is malformed: names the file, the key and what is wrong."""
