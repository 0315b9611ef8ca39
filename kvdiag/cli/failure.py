"""How every command ends on a KvdiagError: its message on stderr, its exit code."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from kvdiag.domain.errors import KvdiagError
from kvdiag.domain.safe_text import plain


def exit_with(error: KvdiagError) -> NoReturn:
    """`kvdiag: <message>` on stderr, then exit with the error's code.

    The message may quote file names and a metrics server's answers: it is printed plain.
    """
    click.echo(f"kvdiag: {plain(error)}", err=True)
    sys.exit(int(error.exit_code))
