"""`kvdiag compare BEFORE AFTER`: option parsing and output policy; the work is in
kvdiag/compare."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kvdiag.cli.common import csv_values, deliver, parse_thresholds, side_path
from kvdiag.cli.failure import exit_with
from kvdiag.cli.redact import redact_options, redacted_inputs
from kvdiag.domain.errors import KvdiagError
from kvdiag.domain.exitcodes import ExitCode
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.reports import OutputFormat

# --fail-on: the least bad outcome that exits 1 (None: never).
_FAIL_ON = {"unchanged": 1, "regressed": 2, "never": None}
COMPARE_EPILOG = (
    "\b\nExit codes:\n"
    "  0  fixed or improved (or any outcome with --fail-on never)\n"
    "  1  unchanged, not comparable or regressed (only regressed with --fail-on regressed)\n"
    "  2  usage error (bad option or argument)\n"
    "  3  a side is missing, or nothing in it could be ingested\n"
    "  4  internal error\n"
    "  5  a disk kvdiag writes to is full\n"
    "  130  interrupted (Ctrl-C); nothing was written"
)


@click.command("compare", epilog=COMPARE_EPILOG)
@click.argument("before")
@click.argument("after")
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice([f.value for f in OutputFormat]),
    default="text",
    show_default=True,
    help="Output format (html: one self-contained file with the two runs' charts overlaid).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the report here instead of stdout (written only when complete).",
)
@click.option(
    "--fail-on",
    type=click.Choice(list(_FAIL_ON)),
    default="unchanged",
    show_default=True,
    help="Exit 1 when the outcome is this or worse (unchanged < regressed).",
)
@click.option("--year", type=click.IntRange(1970, 2200), help="Year of log lines (both runs).")
@click.option("--select", multiple=True, help="Only these rules, for both runs.")
@click.option("--ignore", multiple=True, help="Skip these rules, for both runs.")
@click.option(
    "--set", "thresholds", multiple=True, metavar="RULE.NAME=VALUE", help="For both runs."
)
@click.option("--color/--no-color", default=None, help="Colour the terminal report.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or summary on stderr.")
@redact_options
def compare_cmd(
    before: str,
    after: str,
    fmt: str,
    output: Path | None,
    fail_on: str,
    year: int | None,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    thresholds: tuple[str, ...],
    color: bool | None,
    quiet: bool,
    redact: bool,
    keep: tuple[str, ...],
    redact_map: Path | None,
) -> None:
    """Did the change work? Compare two runs of the same service, BEFORE and AFTER a change.

    Each of BEFORE and AFTER is an incident folder, an archive, a single file, a database
    `kvdiag analyze --db` kept, or `example:NAME` for a bundled example. kvdiag analyses
    both, then says whether they carried the same load (requests, arrival rate, lengths,
    within 15 %; if not, the outcome is judged per request arrived), every setting that
    differs and where each value came from, each layer's quantities side by side, and the
    outcome: fixed, improved, unchanged, regressed or not_comparable, with the change that
    explains it. BEFORE's remedies are checked against AFTER: applied or not, with what effect.

    \b
    Examples:
      kvdiag compare example:vllm-b-saturation example:vllm-b2-saturation-larger-pool
      kvdiag compare ./before/ ./after/ -f html -o compare.html
      kvdiag compare before.duckdb ./after/ --format json
      kvdiag compare ./before/ ./after/ --redact -f html -o compare.html
    """
    from kvdiag.compare.sides import is_kept_database

    given = [side_path(before), side_path(after)]
    if redact and any(p.is_file() and is_kept_database(p) for p in given):
        raise click.UsageError("--redact needs the incidents themselves, not kept databases")
    opts = AnalyzeOptions(
        incident=given[0],
        year=year,
        select=csv_values(select),
        ignore=csv_values(ignore),
        thresholds=parse_thresholds(thresholds),
    )
    with redacted_inputs(given, redact, keep, redact_map, output, quiet) as (sides, labels):
        label_pair = (labels[0], labels[1]) if labels else (before, after)
        outcome_rank = _compare(sides, label_pair, opts, fmt, output, color, quiet)
    threshold = _FAIL_ON[fail_on]
    failed = threshold is not None and outcome_rank >= threshold
    sys.exit(int(ExitCode.FINDINGS if failed else ExitCode.OK))


def _compare(
    sides: list[Path],
    labels: tuple[str, str],
    opts: AnalyzeOptions,
    fmt: str,
    output: Path | None,
    color: bool | None,
    quiet: bool,
) -> int:
    """Compare and deliver the report; the outcome's rank."""
    from kvdiag.analyzer.progress import TerminalProgress
    from kvdiag.compare import compare_paths
    from kvdiag.reports.comparison.render import render_compare

    progress = None
    if not quiet and sys.stderr.isatty():
        progress = TerminalProgress(lambda text: click.echo(text, nl=False, err=True))
    try:
        result = compare_paths(sides[0], sides[1], opts, progress, labels=labels)
    except KvdiagError as exc:
        exit_with(exc)
    finally:
        if progress is not None:
            progress.clear()
    said = None if quiet else f"wrote {output}: {result.outcome.value}"
    deliver(lambda f, c: render_compare(result, f, color=c), fmt, output, color, said)
    return result.outcome.rank
