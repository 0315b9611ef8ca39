"""What several commands share: option parsing and writing a report whole."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from kvdiag.analyzer.atomic import write_atomic
from kvdiag.cli.failure import exit_with
from kvdiag.domain.errors import NoSpaceError
from kvdiag.reports import OutputFormat


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


def deliver(
    render: Callable[[OutputFormat, bool], str],
    fmt: str,
    output: Path | None,
    color: bool | None,
    said: str | None,
) -> None:
    """Render in the format asked and print it, or write it whole to `output` (then say
    `said` on stderr, unless None). Colour only for the terminal format on a TTY without
    NO_COLOR, unless --color/--no-color says otherwise."""
    out_fmt = OutputFormat(fmt)
    use_color = (
        color
        if color is not None
        else (output is None and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    )
    text = render(out_fmt, bool(use_color and out_fmt is OutputFormat.TEXT))
    if output is not None:
        write_report(output, text, None)
        if said is not None:
            click.echo(said, err=True)
    else:
        click.echo(text, nl=False, color=bool(use_color))


def side_path(value: str) -> Path:
    """A path, or `example:NAME` for a bundled example incident."""
    from kvdiag.cli.examples import EXAMPLES, example_path

    if value.startswith("example:"):
        name = value.removeprefix("example:")
        if name not in EXAMPLES:
            raise click.BadParameter(f"no bundled example {name!r} (see `kvdiag examples`)")
        return example_path(name)
    return Path(value)
