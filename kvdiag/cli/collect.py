"""`kvdiag collect`: record an incident bundle from a running server."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # urllib and subprocess: only when collecting
    from kvdiag.analyzer.live.collect import CollectResult

TOKEN_ENV = "KVDIAG_BEARER_TOKEN"


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    from kvdiag.analyzer.live.durations import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _token(token_file: Path | None) -> str | None:
    if token_file is not None:
        return token_file.read_text(encoding="utf-8").strip() or None
    return os.environ.get(TOKEN_ENV) or None


@click.command("collect")
@click.option(
    "--url",
    required=True,
    help="Server base URL, e.g. http://127.0.0.1:8000 (its /metrics is scraped).",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder to write the bundle into.",
)
@click.option(
    "--duration",
    default="10m",
    show_default=True,
    callback=_duration,
    help="How long to collect: 30s, 10m, 1h.",
)
@click.option(
    "--interval",
    default="5s",
    show_default=True,
    callback=_duration,
    help="Time between scrapes and GPU snapshots.",
)
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help=f"File holding a bearer token (else ${TOKEN_ENV}); secrets never go on the command line.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def collect_cmd(
    url: str, out: Path, duration: float, interval: float, token_file: Path | None, quiet: bool
) -> None:
    """Collect /metrics every INTERVAL for DURATION (and nvidia-smi where present).

    \b
    The folder analyses like any other: kvdiag analyze OUT
    Ctrl-C stops early and keeps what was collected.
    """
    from kvdiag.analyzer.live.collect import CollectPlan, collect

    if interval <= 0 or duration <= 0:
        raise click.BadParameter("duration and interval must be positive")
    plan = CollectPlan(
        url=url, out=out, duration_s=duration, interval_s=interval, token=_token(token_file)
    )
    show = not quiet and sys.stderr.isatty()

    def tick(result: CollectResult, left: float) -> None:
        if show:
            click.echo(
                f"\r\x1b[K{result.scrapes_ok} scrapes ({result.scrapes_failed} failed), "
                f"{left:.0f} s left",
                nl=False,
                err=True,
            )

    result = collect(plan, tick)
    if show:
        click.echo("\r\x1b[K", nl=False, err=True)
    if not quiet:
        state = "interrupted; kept" if result.interrupted else "collected"
        gpus = (
            f", {result.gpu_snapshots} GPU snapshots"
            if plan.nvidia_smi
            else ", no nvidia-smi on this host"
        )
        click.echo(
            f"{state} {result.scrapes_ok} scrapes ({result.scrapes_failed} failed){gpus} in {out}",
            err=True,
        )
        click.echo(f"next: kvdiag analyze {out}", err=True)
    if result.scrapes_ok == 0:
        sys.exit(3)
