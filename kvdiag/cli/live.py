"""`kvdiag analyze --prometheus URL`: the live source's options, and the folder it fetches.

The options are added to `analyze` by one decorator and arrive as a single `live`
argument (None when no --prometheus was given), so cli/main.py stays about options in general.
"""

from __future__ import annotations

import functools
import re
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kvdiag.analyzer.live.durations import parse_duration
from kvdiag.analyzer.live.secrets_env import PASSWORD_ENV, TENANT_ENV, TOKEN_ENV, USER_ENV
from kvdiag.cli.failure import exit_with
from kvdiag.domain.errors import KvdiagError, LiveUsageError

if TYPE_CHECKING:  # the fetch loads polars: only when a fetch is asked for
    from kvdiag.analyzer.live.fetch import LiveRequest

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")


@dataclass(frozen=True, slots=True)
class LiveSource:
    request: LiveRequest
    save_to: Path | None
    quiet: bool

    @property
    def label(self) -> str:
        host = urllib.parse.urlsplit(self.request.url).netloc
        return f"prometheus {host}"


def parse_time(text: str, now: float) -> float:
    """'now', unix seconds, or an RFC 3339 time ('2026-11-29T14:00:00Z') -> unix seconds."""
    text = text.strip()
    if text == "now":
        return now
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected now, unix seconds or RFC 3339") from None
    if moment.tzinfo is None:
        raise click.BadParameter(f"{text!r}: give a time zone (Z or +HH:MM)")
    return moment.timestamp()


def _window(since: str, until: str) -> tuple[float, float]:
    """(start, end) in unix seconds; --since is a duration only with a unit (2h, 1d)."""
    end = parse_time(until, time.time())
    m = _SPAN.match(since.strip())
    if m is None:
        start = parse_time(since, end)
    elif m.group(2) == "d":
        start = end - float(m.group(1)) * 86400
    else:
        start = end - parse_duration(since)
    if start >= end:
        raise click.BadParameter(f"--since {since} is not before --until {until}")
    return start, end


_OPTIONS = (
    click.option(
        "--prometheus",
        metavar="URL",
        help="Fetch the incident from a Prometheus HTTP API (Prometheus, Thanos, Mimir, "
        "VictoriaMetrics) instead of reading a folder.",
    ),
    click.option(
        "--since",
        default="1h",
        show_default=True,
        help="Window start: a duration before --until (30m, 2h, 1d) or a time "
        "(RFC 3339 or unix seconds).",
    ),
    click.option(
        "--until",
        default="now",
        show_default=True,
        help="Window end: now, RFC 3339 or unix seconds.",
    ),
    click.option(
        "--selector",
        default="",
        metavar="'{job=\"vllm\"}'",
        help="Label matchers that pick the engines' series.",
    ),
    click.option(
        "--replica-label",
        default="instance",
        show_default=True,
        help="The label that tells replicas apart (instance, pod ...).",
    ),
    click.option(
        "--step",
        metavar="DURATION",
        help="Resolution of the fetched series (default: from the window, about 1,500 points).",
    ),
    click.option(
        "--save-to",
        type=click.Path(path_type=Path, file_okay=False),
        help="Keep the fetched query results in this folder; `kvdiag analyze DIR` reads it "
        "again offline.",
    ),
    click.option(
        "--prometheus-token-file",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        help=f"File holding a bearer token (else ${TOKEN_ENV}).",
    ),
    click.option(
        "--prometheus-basic-auth-file",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        help=f"File holding user:password (else ${USER_ENV} and ${PASSWORD_ENV}); "
        f"${TENANT_ENV} sets X-Scope-OrgID. Secrets never go on the command line.",
    ),
)
_NAMES = (
    "prometheus",
    "since",
    "until",
    "selector",
    "replica_label",
    "step",
    "save_to",
    "prometheus_token_file",
    "prometheus_basic_auth_file",
)


def live_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the live-source options; the command receives them as `live: LiveSource | None`."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _NAMES}
        kwargs["live"] = _source(given, bool(kwargs.get("quiet")))
        return command(*args, **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def _source(given: dict[str, Any], quiet: bool) -> LiveSource | None:
    if not given["prometheus"]:
        if given["save_to"] is not None:
            raise click.UsageError("--save-to goes with --prometheus")
        return None
    from kvdiag.analyzer.live.client import auth_from
    from kvdiag.analyzer.live.fetch import LiveRequest
    from kvdiag.analyzer.live.promql import selector_matchers

    since, until = _window(given["since"], given["until"])
    try:
        matchers = selector_matchers(given["selector"])
        step = parse_duration(given["step"]) if given["step"] else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    auth = auth_from(given["prometheus_token_file"], given["prometheus_basic_auth_file"])
    request = LiveRequest(
        given["prometheus"], since, until, matchers, given["replica_label"], step, auth
    )
    return LiveSource(request, given["save_to"], quiet)


@contextmanager
def live_folder(source: LiveSource) -> Iterator[Path]:
    """The folder of fetched results: --save-to, or a scratch folder removed afterwards."""
    if source.save_to is not None:
        _fetch(source, source.save_to)
        yield source.save_to
        return
    with tempfile.TemporaryDirectory(prefix="kvdiag-prometheus-") as scratch:
        _fetch(source, Path(scratch))
        yield Path(scratch)


def _fetch(source: LiveSource, out: Path) -> None:
    from kvdiag.analyzer.live.fetch import fetch

    show = not source.quiet and sys.stderr.isatty()

    def progress(i: int, n: int, name: str) -> None:
        if show:
            click.echo(f"\r\x1b[K[{i}/{n}] fetching {name}", nl=False, err=True)

    try:
        result = fetch(source.request, out, progress)
    except LiveUsageError as exc:
        raise click.UsageError(str(exc)) from None
    except KvdiagError as exc:  # as `analyze` reports any input error: message, exit code
        exit_with(exc)
    finally:
        if show:
            click.echo("\r\x1b[K", nl=False, err=True)
    if not source.quiet:
        click.echo(
            f"fetched {len(result.queries)} series names ({result.samples:,} samples, "
            f"{result.replicas} replicas) in {result.requests} requests, {result.seconds:.1f} s"
            + (f"; saved in {out}" if source.save_to else ""),
            err=True,
        )
