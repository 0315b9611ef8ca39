"""`kvdiag plan INCIDENT -- FLAGS`: option parsing and output policy; the work is in
kvdiag/plan."""

from __future__ import annotations

from pathlib import Path

import click

from kvdiag.cli.common import deliver, side_path
from kvdiag.cli.failure import exit_with
from kvdiag.domain.errors import KvdiagError
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.reports import OutputFormat

PLAN_EPILOG = (
    "\b\nExit codes:\n"
    "  0  plan made\n"
    "  2  usage error, or a flag kvdiag cannot plan with for this engine\n"
    "  3  the incident is missing, nothing in it could be ingested, or it holds no traffic\n"
    "  4  internal error\n"
    "  130  interrupted (Ctrl-C); nothing was written"
)


@click.command("plan", epilog=PLAN_EPILOG, context_settings={"ignore_unknown_options": True})
@click.argument("incident")
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice([f.value for f in OutputFormat]),
    default="text",
    show_default=True,
)
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write here.")
@click.option(
    "--load-scale",
    type=click.FloatRange(0.01, 1000),
    default=1.0,
    show_default=True,
    help="Replay the traffic this many times as fast (the same lengths): headroom.",
)
@click.option(
    "--knee",
    is_flag=True,
    help="Also find the load (clients, or x the arrival rate) at which requests start to "
    "wait and TTFT p95 doubles, for the current and the changed configuration.",
)
@click.option("--seed", type=int, default=None, help="Seed of drawn lengths (counters only).")
@click.option("--year", type=click.IntRange(1970, 2200), help="Year of log lines.")
@click.option("--color/--no-color", default=None, help="Colour the terminal report.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr but errors.")
def plan_cmd(
    incident: str,
    flags: tuple[str, ...],
    fmt: str,
    output: Path | None,
    load_scale: float,
    knee: bool,
    seed: int | None,
    year: int | None,
    color: bool | None,
    quiet: bool,
) -> None:
    """What would this incident's traffic have done under another configuration?

    kvdiag replays the incident's own requests (from its request log, else its counters)
    through a model of the engine's scheduler, with a step time fitted to the incident's
    own throughput: first on the incident's configuration, compared with what was
    observed (the baseline error, printed beside every prediction), then with the engine
    flags given after `--`, spelled as the incident's engine spells them. Without flags it
    tries the remedies `analyze` proposed and a small grid around the current settings,
    those that clear the queue first, cheapest first.

    \b
    Examples:
      kvdiag plan example:vllm-b-saturation -- --kv-cache-memory-bytes 160M
      kvdiag plan ./incident/ -- --max-num-seqs 32 --kv-cache-dtype fp8
      kvdiag plan ./incident/ --load-scale 2
      kvdiag plan ./incident/ --knee -- --kv-cache-memory-bytes 32M
    """
    from kvdiag.analyzer.model.traffic import DEFAULT_SEED
    from kvdiag.plan import PlanOptions, plan_incident
    from kvdiag.reports.plan.render import render_plan

    words = tuple(w for w in flags if w != "--")
    path = side_path(incident)
    try:
        result = plan_incident(
            path,
            AnalyzeOptions(incident=path, year=year, label=incident),
            PlanOptions(words, load_scale, DEFAULT_SEED if seed is None else seed, knee),
        )
    except KvdiagError as exc:
        exit_with(exc)
    said = None if quiet else f"wrote {output}"
    deliver(lambda f, c: render_plan(result, f, color=c), fmt, output, color, said)
