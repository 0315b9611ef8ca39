"""What several commands share: option parsing and writing a report whole."""

from __future__ import annotations

import errno
from pathlib import Path

import click

from kvdiag.analyzer.atomic import write_atomic
from kvdiag.analyzer.cli.failure import exit_with
from kvdiag.analyzer.errors import NoSpaceError


def csv_values(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


def parse_thresholds(values: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        code, dot, name = key.partition(".")
        if not sep or not dot or not code or not name:
            raise click.BadParameter(
                f"{item!r}: expected RULE.THRESHOLD=VALUE, e.g. KV301.usage_full=0.95"
            )
        try:
            out[key] = float(raw)
        except ValueError:
            raise click.BadParameter(f"{item!r}: {raw!r} is not a number") from None
    return out


def write_report(output: Path, text: str, db_path: Path | None) -> None:
    """The report, whole or not at all; a full disk is said as such (exit 5)."""
    try:
        write_atomic(output, text)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        kept = f"; the database is complete at {db_path}" if db_path else ""
        exit_with(NoSpaceError(f"{output}: its disk is full, no report written{kept}"))
