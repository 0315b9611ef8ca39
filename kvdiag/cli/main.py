"""The command line. Option parsing and output policy only; the work is in pipeline.py."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click

from kvdiag import __version__
from kvdiag.cli.collect import collect_cmd
from kvdiag.cli.common import csv_values, parse_thresholds, write_report
from kvdiag.cli.compare import compare_cmd
from kvdiag.cli.examples import EXAMPLES, example_path
from kvdiag.cli.failure import exit_with
from kvdiag.cli.formats import formats_cmd
from kvdiag.cli.live import LiveSource, live_folder, live_options
from kvdiag.cli.plan import plan_cmd
from kvdiag.cli.redact import redact_cmd, redact_options, redacted_inputs
from kvdiag.domain.errors import KvdiagError
from kvdiag.domain.exitcodes import ExitCode, exit_code_table
from kvdiag.domain.records.diagnosis import Diagnosis, Severity
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.reports import OutputFormat

if TYPE_CHECKING:  # the analysis loads polars and DuckDB: only when a command runs
    from kvdiag.analyzer.progress import TerminalProgress

EPILOG = "\b\nExit codes:\n" + exit_code_table()
_FAIL_ON = {
    "info": Severity.INFO,
    "warning": Severity.WARNING,
    "error": Severity.ERROR,
    "never": None,
}


def _terminal_progress(quiet: bool) -> TerminalProgress | None:
    """Progress on stderr when it is a terminal (never into a pipe or a log file)."""
    from kvdiag.analyzer.progress import TerminalProgress

    if quiet or not sys.stderr.isatty():
        return None
    return TerminalProgress(lambda text: click.echo(text, nl=False, err=True))


def exit_code_for(diagnosis: Diagnosis, fail_on: Severity | None) -> ExitCode:
    if diagnosis.engine_problems:
        return ExitCode.INTERNAL
    top = diagnosis.max_severity
    if fail_on is not None and top is not None and top.rank >= fail_on.rank:
        return ExitCode.FINDINGS
    return ExitCode.OK


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kvdiag")
def cli() -> None:
    """kvdiag: why does the KV cache say 90 %? Forensics for vLLM / SGLang incidents.

    Point `kvdiag analyze` at the folder you collected during an incident (server logs,
    /metrics scrapes, nvidia-smi, launch flags, the model's config.json). It reconciles the
    pool with the card, the payload with the percentage and the peak demand with the pool,
    and names the incident class with evidence (file:line) and priced remedies.
    Then `kvdiag compare BEFORE AFTER` says whether a change fixed it at the same load, and
    `kvdiag plan INCIDENT -- FLAGS` what the same traffic would do under another
    configuration.
    """


@cli.command(epilog=EPILOG)
@click.argument("incident", required=False, type=click.Path(path_type=Path))
@click.option(
    "--example",
    type=click.Choice(sorted(EXAMPLES)),
    help="Analyse a bundled real incident instead (see `kvdiag examples`).",
)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice([f.value for f in OutputFormat]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the report here instead of stdout (written only when complete).",
)
@click.option(
    "--db",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Keep the DuckDB database here for SQL afterwards (`kvdiag tables` lists its tables).",
)
@click.option(
    "--fail-on",
    type=click.Choice(list(_FAIL_ON)),
    default="error",
    show_default=True,
    help="Exit 1 when a finding is at or above this severity.",
)
@click.option(
    "--year",
    type=click.IntRange(1970, 2200),
    help="Year of vLLM log lines (they print none); default: from container timestamps, "
    "scrape times, or the file date.",
)
@click.option(
    "--model-config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The model's config.json, when it is not in the incident folder.",
)
@click.option("--select", multiple=True, help="Only these rules (codes or names, comma-separated).")
@click.option("--ignore", multiple=True, help="Skip these rules (codes or names, comma-separated).")
@click.option(
    "--set",
    "thresholds",
    multiple=True,
    metavar="RULE.NAME=VALUE",
    help="Override a rule threshold, e.g. KV301.usage_full=0.95 (see `kvdiag rules`).",
)
@click.option(
    "--color/--no-color",
    default=None,
    help="Colour the terminal report (default: only on a TTY without NO_COLOR).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress or summary on stderr.")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks of internal errors.")
@click.option(
    "--timings", is_flag=True, help="Print seconds per phase on stderr (timing PHASE SECONDS)."
)
@live_options
@redact_options
def analyze_cmd(
    incident: Path | None,
    example: str | None,
    fmt: str,
    output: Path | None,
    db: Path | None,
    fail_on: str,
    year: int | None,
    model_config: Path | None,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    thresholds: tuple[str, ...],
    color: bool | None,
    quiet: bool,
    verbose: bool,
    timings: bool,
    live: LiveSource | None,
    redact: bool,
    keep: tuple[str, ...],
    redact_map: Path | None,
) -> None:
    """Analyse an incident folder (or archive, or single file) and print the diagnosis.

    \b
    Examples:
      kvdiag analyze ./incident/
      kvdiag analyze ./incident/ --format json -o diagnosis.json
      kvdiag analyze --example vllm-b-saturation
      kvdiag analyze --prometheus http://prom:9090 --since 2h --selector '{job="vllm"}'
      kvdiag analyze ./incident/ --redact -f html -o report.html
    """
    if sum(x is not None for x in (incident, example, live)) != 1:
        raise click.UsageError(
            "give an INCIDENT folder, --example NAME or --prometheus URL (one of them)"
        )
    local = example_path(example) if example else incident
    source: contextlib.AbstractContextManager[Path] = (
        live_folder(live) if live is not None else contextlib.nullcontext(cast(Path, local))
    )
    with (
        source as given,  # a fetched folder lives until the report is written
        redacted_inputs([given], redact, keep, redact_map, output, quiet) as (paths, labels),
    ):
        opts = AnalyzeOptions(
            incident=paths[0],
            db=db,
            year=year,
            fail_on=_FAIL_ON[fail_on],
            select=csv_values(select),
            ignore=csv_values(ignore),
            thresholds=parse_thresholds(thresholds),
            label=labels[0] if labels else example or (live.label if live else None),
            model_config=model_config,
        )
        from kvdiag.pipeline import analyze
        from kvdiag.reports import render

        progress = _terminal_progress(quiet)
        try:
            result = analyze(opts, progress)
        except KvdiagError as exc:
            exit_with(exc)
        finally:
            if progress is not None:
                progress.clear()
        out_fmt = OutputFormat(fmt)
        render_start = time.perf_counter()
        use_color = (
            color
            if color is not None
            else (output is None and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
        )
        text = render(
            result.diagnosis, out_fmt, color=bool(use_color and out_fmt is OutputFormat.TEXT)
        )
        if output is not None:
            write_report(output, text, result.db_path)
        else:
            click.echo(text, nl=False, color=bool(use_color))  # click strips ANSI unless told
        v = result.diagnosis.verdict
        if not quiet and (output is not None or result.db_path is not None):
            where = f"wrote {output}" if output else "report on stdout"
            db_note = f"; database {result.db_path}" if result.db_path else ""
            click.echo(f"{where}: {v.primary.value} ({v.confidence.value}){db_note}", err=True)
        if timings:
            phases = {**result.timings, "render": time.perf_counter() - render_start}
            for phase, seconds in phases.items():
                click.echo(f"timing {phase} {seconds:.4f}", err=True)
        for problem in result.diagnosis.engine_problems:
            click.echo(f"kvdiag: {problem}", err=True)
        sys.exit(int(exit_code_for(result.diagnosis, opts.fail_on)))


cli.add_command(analyze_cmd, name="analyze")


cli.add_command(collect_cmd)
cli.add_command(compare_cmd)
cli.add_command(plan_cmd)
cli.add_command(redact_cmd)


@cli.command()
def examples() -> None:
    """List the bundled example incidents."""
    for name, what in sorted(EXAMPLES.items()):
        click.echo(f"{name}\n    {what}")


@cli.command()
@click.option(
    "-f", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def rules(fmt: str) -> None:
    """List every rule: code, name, layer, what it needs, its thresholds."""
    from kvdiag.rules import RULES

    if fmt == "json":
        import json

        data = [
            {
                "code": r.code,
                "name": r.name,
                "layer": r.layer,
                "severity": r.severity.value,
                "implies": r.implies.value if r.implies else None,
                "summary": r.summary(),
                "requires": list(r.requires),
                "requires_any": list(r.requires_any),
                "thresholds": [
                    {"name": t.name, "default": t.default, "unit": t.unit, "doc": t.doc}
                    for t in r.thresholds
                ],
            }
            for r in RULES
        ]
        click.echo(json.dumps(data, indent=2))
        return
    for r in RULES:
        layer = f"layer {r.layer}" if r.layer else "no layer"
        implied = r.implies.value if r.implies else "-"
        click.echo(f"{r.code} {r.name} ({layer}, {r.severity.value}, implies {implied})")
        click.echo(f"    {r.summary()}")
        needs = list(r.requires) + ([" or ".join(r.requires_any)] if r.requires_any else [])
        click.echo(f"    needs: {', '.join(needs) or 'nothing'}")
        for t in r.thresholds:
            click.echo(f"    threshold {r.code}.{t.name} = {t.default:g} {t.unit}: {t.doc}")


@cli.command()
@click.argument("code")
def explain(code: str) -> None:
    """Explain one rule (code or name): what it checks, what it needs, its thresholds."""
    from kvdiag.rules import get_rule

    try:
        rule = get_rule(code.strip())
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="CODE") from None
    implied = rule.implies.value if rule.implies else "-"
    click.echo(
        f"{rule.code} {rule.name} (layer {rule.layer}, {rule.severity.value}, implies {implied})"
    )
    click.echo("")
    for line in inspect.cleandoc(rule.__doc__ or "").splitlines():
        click.echo(f"  {line}".rstrip())
    needs = list(rule.requires) + ([" or ".join(rule.requires_any)] if rule.requires_any else [])
    click.echo(f"\nNeeds rows in: {', '.join(needs) or 'nothing'}")
    click.echo("Thresholds (override with --set CODE.NAME=VALUE):")
    for t in rule.thresholds:
        click.echo(f"  {rule.code}.{t.name} = {t.default:g} {t.unit}: {t.doc}")


@cli.command()
def tables() -> None:
    """Describe the tables of the database that `analyze --db PATH` keeps."""
    from kvdiag.analyzer.schema import TABLES

    for t in TABLES:
        click.echo(f"{t.name}: {t.doc}")
        for c in t.columns:
            click.echo(f"    {c.name:<18} {c.type:<10} {c.doc}")


cli.add_command(formats_cmd)


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps errors to the documented exit codes."""
    verbose = "-v" in (argv or sys.argv) or "--verbose" in (argv or sys.argv)
    try:
        cli.main(args=argv, prog_name="kvdiag", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("kvdiag: interrupted; nothing was written", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except click.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.USAGE if exc.exit_code == 2 else exc.exit_code)
    except KvdiagError as exc:
        exit_with(exc)
    except KeyboardInterrupt:
        click.echo("kvdiag: interrupted; nothing was written", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except BaseException as exc:
        # Ctrl-C inside a polars call that calls back into Python comes out as pyo3's
        # PanicException (a BaseException) wrapping the KeyboardInterrupt; the store was
        # discarded on the way out all the same.
        if type(exc).__name__ == "PanicException" and "KeyboardInterrupt" in str(exc):
            click.echo("kvdiag: interrupted; nothing was written", err=True)
            sys.exit(int(ExitCode.INTERRUPTED))
        if not isinstance(exc, Exception):
            raise
        if verbose:
            traceback.print_exc()
        click.echo(
            f"kvdiag: internal error: {exc!r} (run with -v for the traceback; please report it)",
            err=True,
        )
        sys.exit(int(ExitCode.INTERNAL))
