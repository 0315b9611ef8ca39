"""`kvdiag formats`: the command; the measuring is in format_coverage.py (loaded when the
command runs, so that `kvdiag --help` does not load the ingesters)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from kvdiag.cli.failure import exit_with
from kvdiag.domain.errors import KvdiagError


@click.command("formats")
@click.argument("files", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--top", default=10, show_default=True, help="Unmatched shapes to show per file.")
@click.option("--year", type=int, help="Year for logs that print none (as in `analyze`).")
@click.option(
    "-f", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("--list", "list_only", is_flag=True, help="List the declared formats instead.")
def formats_cmd(
    files: tuple[Path, ...], top: int, year: int | None, fmt: str, list_only: bool
) -> None:
    """Show how much of each FILE the declared formats parse, and the shapes they miss.

    \b
    Examples:
      kvdiag formats server.log
      kvdiag formats ./incident/ --top 20 --format json
      kvdiag formats --list
    """
    from kvdiag.cli.format_coverage import list_formats, measure, show

    if list_only:
        list_formats()
        return
    if not files:
        raise click.UsageError("give at least one FILE (or --list)")
    try:
        covered = [c for f in files for c in measure(f, top, year)]
    except KvdiagError as exc:
        exit_with(exc)
    if fmt == "json":
        data = [asdict(c) | {"coverage": c.coverage} for c in covered]
        click.echo(json.dumps(data, indent=2))
        return
    for cov in covered:
        show(cov)
