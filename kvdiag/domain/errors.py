"""One error hierarchy. Input errors carry where they happened.

Every error kvdiag raises on purpose is defined here, and each ends the run with its exit
code (exitcodes.py; the CLI prints the message after `kvdiag: `):

    KvdiagError             4  kvdiag's own fault (a bug, a bundled file broken)
    ├── InputError          3  an input is missing or cannot be read: says where
    │   ├── NoInputError       the incident holds nothing that can be analysed
    │   ├── ArchiveLimitError  an archive stops expanding (a limit, or damage)
    │   ├── LiveSourceError    the metrics server failed, or answered nonsense
    │   └── NotPlannableError  the incident holds no traffic or no pool to replay
    ├── LiveUsageError      2  a live source asked for in a way that cannot work
    ├── PlanFlagError       2  a flag `kvdiag plan` cannot apply to this engine
    ├── FormatPackError     4  a bundled format pack is malformed
    ├── UnknownDtype        4  a dtype of no known size (dtypes.py; its callers catch it)
    ├── UnsizedKvFormat     4  a KV format sized by the backend (dtypes.py; callers catch it)
    └── NoSpaceError        5  the disk kvdiag writes to is full

One input that cannot be read is not an error but a result: it is set aside with its
reason (an InputRecord, an InputProblem) and the others are read. So the unpacker catches
ArchiveLimitError: the archive's extraction stops there, listed as refused with the reason,
and the members already out are read.

This module is part of the ground floor (kvdiag.domain), so the domain's own arithmetic
raises from this hierarchy too; any other exception that escapes is a bug (exit 4).
"""

from __future__ import annotations

from pathlib import Path

from kvdiag.domain.exitcodes import ExitCode


class KvdiagError(Exception):
    """Base of every error kvdiag raises on purpose."""

    exit_code: ExitCode = ExitCode.INTERNAL


class InputError(KvdiagError):
    """An input is missing or cannot be read.

    Given a `path` (and a `line` in it), the message starts with where: `path:line: ...`.
    """

    exit_code = ExitCode.NO_INPUT

    def __init__(
        self, message: str, *, path: str | Path | None = None, line: int | None = None
    ) -> None:
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line if path is not None else None
        super().__init__(f"{self.where}: {message}" if self.where else message)

    @property
    def where(self) -> str:
        """`path:line`, `path`, or "" for an error about no one input."""
        if self.path is None:
            return ""
        return self.path if self.line is None else f"{self.path}:{self.line}"


class NoInputError(InputError):
    """The incident folder is missing, or nothing in it could be ingested."""


class ArchiveLimitError(InputError):
    """Expanding an archive further would break a limit, or its data is damaged.

    Its `path` is `archive!member` when one member broke the limit.
    """


class LiveSourceError(InputError):
    """The metrics server could not be reached, refused a query, or answered nonsense."""


class NotPlannableError(InputError):
    """`kvdiag plan`: the incident holds no traffic to replay, or no pool to replay it on."""


class LiveUsageError(KvdiagError):
    """The live source was asked for in a way that cannot work (bad URL, window, selector)."""

    exit_code = ExitCode.USAGE


class PlanFlagError(KvdiagError):
    """`kvdiag plan`: a flag the incident's engine does not take, or one the scheduler model
    does not use (planning with it would silently ignore it)."""

    exit_code = ExitCode.USAGE


class FormatPackError(KvdiagError):
    """A format pack (TOML) is malformed: names the file, the key and what is wrong.

    The packs ship with kvdiag, so a malformed one is kvdiag's fault: exit code 4.
    """


class NoSpaceError(KvdiagError):
    """The disk holding the database (scratch under TMPDIR, or --db) is full.

    Not the input's fault, nor a bug: the run stops there, instead of going on with each
    remaining input "skipped" for the same reason and a report short of them.
    """

    exit_code = ExitCode.NO_SPACE
