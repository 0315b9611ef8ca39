"""`kvdiag redact INCIDENT -o BUNDLE`, and the `--redact` option of analyze and compare."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kvdiag.cli.failure import exit_with
from kvdiag.domain.errors import KvdiagError
from kvdiag.redact.catalogue import category_names

if TYPE_CHECKING:  # the redaction classifies files with the ingesters: only when it runs
    from kvdiag.redact.bundle import Redaction

CATEGORIES = category_names()
_KEEP_HELP = "Keep this category as it is (repeatable): " + ", ".join(CATEGORIES) + "."


def _progress(quiet: bool) -> Callable[[str, int, int], None] | None:
    if quiet or not sys.stderr.isatty():
        return None

    def show(phase: str, done: int, total: int) -> None:
        click.echo(f"\r\x1b[K{phase}: {done:,}/{total:,} files", nl=False, err=True)
        if phase == "writing" and done == total:
            click.echo("\r\x1b[K", nl=False, err=True)

    return show


def _check_target(output: Path, map_path: Path) -> None:
    if output.is_dir() and any(output.iterdir()):
        raise click.BadParameter(f"{output} is a folder that is not empty", param_hint="-o")
    resolved = output.resolve()
    if resolved == map_path.resolve() or resolved in map_path.resolve().parents:
        raise click.BadParameter(
            "the mapping file must not go inside the bundle", param_hint="--map"
        )


REDACT_EPILOG = (
    "\b\nExit codes:\n"
    "  0  the bundle and its mapping are written\n"
    "  2  usage error (bad option, a folder that is not empty, the mapping inside the bundle)\n"
    "  3  the incident is missing\n"
    "  4  internal error\n"
    "  5  a disk kvdiag writes to is full; no partial bundle is left behind\n"
    "  130  interrupted (Ctrl-C); no partial bundle is left behind"
)


@click.command("redact", epilog=REDACT_EPILOG)
@click.argument("incident", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="The bundle: NAME.tar.gz, .tgz, .tar or .zip, or a new folder.",
)
@click.option("--keep", multiple=True, type=click.Choice(CATEGORIES), help=_KEEP_HELP)
@click.option(
    "--map",
    "map_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where to write the private mapping back to the originals "
    "(default: beside the bundle, BUNDLE.map.json).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress or summary on stderr.")
def redact_cmd(
    incident: Path, output: Path, keep: tuple[str, ...], map_path: Path | None, quiet: bool
) -> None:
    """Write a copy of an incident that is safe to share, with stable pseudonyms.

    Client addresses, host and pod names, internal URLs, user names in paths, model and
    bucket paths, request ids, API keys and tokens, e-mail addresses and prompt text are
    replaced by pseudonyms: the same address is `ip-1` in every file, so replicas and
    requests can still be followed. Numbers, timestamps, metric names, engine messages and
    flags stay: the bundle analyses to the same verdict. REDACTED.md inside the bundle says
    what was replaced, per category and per file; the mapping back to the originals is
    written beside the bundle, never inside it. Keep that file private.

    \b
    Examples:
      kvdiag redact ./incident/ -o shareable.tar.gz
      kvdiag redact incident.zip -o shareable.zip --keep model
      kvdiag analyze ./incident/ --redact -f html -o report.html
    """
    from kvdiag.redact.run import default_map_path, write_bundle
    from kvdiag.redact.summary import terminal_summary

    map_file = map_path or default_map_path(output)
    _check_target(output, map_file)
    try:
        redaction = write_bundle(incident, output, frozenset(keep), _progress(quiet))
    except KvdiagError as exc:
        exit_with(exc)
    redaction.names.write_map(map_file, str(incident))
    if not quiet:
        for line in terminal_summary(redaction):
            click.echo(line, err=True)
        click.echo(f"wrote {output}; mapping (keep it private) {map_file}", err=True)


def redact_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--redact`, `--keep` and `--redact-map` for a command that writes reports."""
    f = click.option(
        "--redact-map",
        type=click.Path(path_type=Path, dir_okay=False),
        help="With --redact: where to keep the private mapping back to the originals "
        "(default: beside -o as REPORT.map.json; none when the report goes to stdout).",
    )(f)
    f = click.option("--keep", multiple=True, type=click.Choice(CATEGORIES), help=_KEEP_HELP)(f)
    return click.option(
        "--redact",
        is_flag=True,
        help="Report on a redacted copy: excerpts, paths and labels carry pseudonyms "
        "(as `kvdiag redact` writes them), safe to attach to a ticket that leaves the company.",
    )(f)


@contextlib.contextmanager
def redacted_inputs(
    paths: list[Path],
    redact: bool,
    keep: tuple[str, ...],
    map_path: Path | None,
    output: Path | None,
    quiet: bool = False,
) -> Iterator[tuple[list[Path], list[str] | None]]:
    """The inputs to analyse, redacted with one pseudonym table when asked; their labels."""
    if not redact:
        if keep or map_path:
            raise click.UsageError("--keep and --redact-map go with --redact")
        yield paths, None
        return
    from kvdiag.redact.pseudonyms import Pseudonyms
    from kvdiag.redact.run import default_map_path, redacted_copy

    names = Pseudonyms()
    with contextlib.ExitStack() as stack:
        copies: list[tuple[Path, Redaction]] = []
        for path in paths:
            try:
                copies.append(stack.enter_context(redacted_copy(path, frozenset(keep), names)))
            except KvdiagError as exc:
                exit_with(exc)
        where = map_path or (default_map_path(output) if output is not None else None)
        if where is not None:
            names.write_map(where, ", ".join(str(p) for p in paths))
        elif not quiet:
            click.echo(
                "kvdiag: no mapping back to the originals kept (--redact-map FILE)", err=True
            )
        # The folders' own names are free text no pattern can vouch for: not shown.
        labels = (
            ["incident (redacted)"]
            if len(paths) == 1
            else ["before (redacted)", "after (redacted)"]
        )
        yield [c[0] for c in copies], labels
