"""The Python API: what `kvdiag analyze`, `compare`, `plan` and `redact` do, as functions
that return the records the commands render (docs/python-api.md).

A face beside the command line, not beneath it: both build the same options and call the
same entry points (pipeline.py, compare, plan, redact/run.py), so a diagnosis made here
renders to the very JSON `kvdiag analyze -f json` prints. What is the command line's own
(exit codes, colour policy, progress on a terminal, writing a report) stays there; errors
come out as the exceptions of kvdiag/domain/errors.py, and arguments the command line would
refuse as usage errors raise ValueError.

`kvdiag/__init__.py` loads this module on first use of one of its names, so that `import
kvdiag` (and `kvdiag --version`) do not pay for polars, DuckDB and the analysis. This module
in turn imports each heavy part only inside the function that needs it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kvdiag.domain.errors import NoInputError
from kvdiag.domain.records.comparison import BeforeAfter
from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.domain.records.plan import Plan
from kvdiag.reports import OutputFormat

if TYPE_CHECKING:  # polars and the analysis load only when a function runs
    import polars as pl

    from kvdiag.analyzer.progress import Progress
    from kvdiag.analyzer.store.kept import Connection
    from kvdiag.redact.bundle import Progress as RedactProgress
    from kvdiag.redact.bundle import Redaction

__all__ = [
    "EXAMPLE_PREFIX",
    "PathArg",
    "analyze",
    "compare",
    "connect",
    "plan",
    "query",
    "redact",
    "render",
    "series_frames",
]

PathArg = str | os.PathLike[str]
"""A path as a string or a `pathlib.Path`; a string may name a bundled example instead."""

EXAMPLE_PREFIX = "example:"
"""`"example:NAME"` names a bundled example incident, as `kvdiag compare` and `plan` take it
(`kvdiag examples` lists them)."""

FormatName = Literal["text", "json", "html", "markdown"]

# `kvdiag plan --load-scale`: the range the command line accepts.
_LOAD_SCALE = (0.01, 1000.0)


def _source(path: PathArg) -> tuple[Path, str | None]:
    """The path to read, and the example's name when `path` is `"example:NAME"`."""
    if not (isinstance(path, str) and path.startswith(EXAMPLE_PREFIX)):
        return Path(path), None
    from kvdiag.cli.examples import EXAMPLES, example_path  # no click: a plain table

    name = path.removeprefix(EXAMPLE_PREFIX)
    if name not in EXAMPLES:
        known = ", ".join(sorted(EXAMPLES))
        raise NoInputError(f"no bundled example {name!r} (there are: {known})", path=path)
    try:
        return example_path(name), name
    except FileNotFoundError as exc:
        raise NoInputError(str(exc), path=path) from None


def _rule_names(given: str | Iterable[str], what: str) -> tuple[str, ...]:
    """Rule codes or names, comma-separated or not (as `--select KV301,KV302`), each
    checked: the command line would silently select no rule for a misspelt one."""
    from kvdiag.rules import get_rule

    items = [given] if isinstance(given, str) else list(given)
    names = tuple(v.strip() for item in items for v in item.split(",") if v.strip())
    for name in names:
        try:
            get_rule(name)
        except KeyError:
            raise ValueError(f"{what}: no rule {name!r} (see `kvdiag rules`)") from None
    return names


def _thresholds(given: Mapping[str, float] | None) -> dict[str, float]:
    """`{"KV301.usage_full": 0.95}`, as `--set KV301.usage_full=0.95`, each key checked
    against the rule's declared thresholds (the rules would ignore an unknown one)."""
    from kvdiag.rules import get_rule

    out: dict[str, float] = {}
    for key, value in (given or {}).items():
        code, dot, name = key.partition(".")
        if not dot or not code or not name:
            raise ValueError(f"threshold {key!r}: expected 'RULE.NAME', e.g. 'KV301.usage_full'")
        try:
            rule = get_rule(code)
        except KeyError:
            raise ValueError(f"threshold {key!r}: no rule {code!r} (see `kvdiag rules`)") from None
        if name not in rule.defaults():
            names = ", ".join(sorted(rule.defaults())) or "none"
            raise ValueError(f"threshold {key!r}: {rule.code} has no {name!r} (it has {names})")
        out[key] = float(value)
    return out


def _options(
    incident: Path,
    *,
    year: int | None,
    select: str | Iterable[str],
    ignore: str | Iterable[str],
    thresholds: Mapping[str, float] | None,
    label: str | None = None,
) -> AnalyzeOptions:
    """The analysis options as the command line builds them from the same choices."""
    return AnalyzeOptions(
        incident=incident,
        year=year,
        select=_rule_names(select, "select"),
        ignore=_rule_names(ignore, "ignore"),
        thresholds=_thresholds(thresholds),
        label=label,
    )


def analyze(
    path: PathArg,
    *,
    db: PathArg | None = None,
    select: str | Iterable[str] = (),
    ignore: str | Iterable[str] = (),
    thresholds: Mapping[str, float] | None = None,
    label: str | None = None,
    model_config: PathArg | None = None,
    year: int | None = None,
    progress: Progress | None = None,
) -> Diagnosis:
    """Analyse an incident and return its diagnosis, as `kvdiag analyze PATH` does.

    `path` is an incident folder, an archive, a single file, `"example:NAME"`, or a
    database an earlier analysis kept (judged again with this call's rule options, without
    its files). `db` keeps the DuckDB database there for `query` afterwards. `select` and
    `ignore` take rule codes or names; `thresholds` maps `"CODE.NAME"` to a value; `label`
    names the incident in reports (default: its folder's name, or the example's);
    `model_config` is the model's config.json when it is not in the folder; `year` is the
    year of log lines that print none; `progress` receives the pipeline's progress.

    Raises NoInputError (nothing to analyse), InputError (an input cannot be read),
    NoSpaceError (a full disk), and ValueError for an unknown rule or threshold.
    """
    from kvdiag.compare.sides import is_kept_database
    from kvdiag.pipeline import analyze as run_analysis
    from kvdiag.pipeline import analyze_kept

    source, example = _source(path)
    opts = _options(
        source,
        year=year,
        select=select,
        ignore=ignore,
        thresholds=thresholds,
        label=label or example,
    )
    if is_kept_database(source):
        if db is not None or model_config is not None:
            raise ValueError("db and model_config go with an incident, not a kept database")
        return analyze_kept(source, opts).diagnosis
    opts = dataclasses.replace(
        opts,
        db=None if db is None else Path(db),
        model_config=None if model_config is None else Path(model_config),
    )
    return run_analysis(opts, progress).diagnosis


def compare(
    before: PathArg,
    after: PathArg,
    *,
    select: str | Iterable[str] = (),
    ignore: str | Iterable[str] = (),
    thresholds: Mapping[str, float] | None = None,
    labels: tuple[str, str] | None = None,
    year: int | None = None,
    progress: Progress | None = None,
) -> BeforeAfter:
    """Compare two runs of one service, BEFORE and AFTER a change, as `kvdiag compare` does.

    Each side is what `analyze` takes (a kept database too). The rule options apply to
    both sides; `labels` name the runs in reports (default: the paths as given). The
    record's `outcome` is fixed, improved, unchanged, regressed or not_comparable.

    Raises NoInputError for a side that cannot be read, ValueError as `analyze` does.
    """
    from kvdiag.compare import compare_paths

    first, _ = _source(before)
    second, _ = _source(after)
    opts = _options(first, year=year, select=select, ignore=ignore, thresholds=thresholds)
    names = labels or (os.fspath(before), os.fspath(after))
    return compare_paths(first, second, opts, progress, labels=names)


def plan(
    path: PathArg,
    flags: str | Sequence[str] = (),
    *,
    load_scale: float = 1.0,
    knee: bool = False,
    seed: int | None = None,
    year: int | None = None,
    label: str | None = None,
) -> Plan:
    """What the incident's traffic would do under other engine flags, as `kvdiag plan`.

    `flags` are the engine's flags as its command line spells them, as words
    (`["--max-num-seqs", "32"]`) or one string (`"--max-num-seqs 32"`); none: the remedies
    `analyze` proposed and a small grid around the current settings. `load_scale` replays
    the traffic that many times as fast (0.01 to 1000); `knee` also finds the load at
    which requests start to wait; `seed` seeds the lengths drawn from counters.

    Raises NoInputError (unreadable incident), NotPlannableError (no traffic or no pool to
    replay, or a fleet), PlanFlagError (a flag the engine does not take, or the model does
    not use), and ValueError for a load scale out of range.
    """
    from kvdiag.analyzer.model.traffic import DEFAULT_SEED
    from kvdiag.plan import PlanOptions, plan_incident

    low, high = _LOAD_SCALE
    if not low <= load_scale <= high:
        raise ValueError(f"load_scale {load_scale}: expected {low:g} to {high:g}")
    words = tuple(shlex.split(flags) if isinstance(flags, str) else flags)
    source, _ = _source(path)
    return plan_incident(
        source,
        AnalyzeOptions(incident=source, year=year, label=label or os.fspath(path)),
        PlanOptions(
            tuple(w for w in words if w != "--"),
            load_scale,
            DEFAULT_SEED if seed is None else seed,
            knee,
        ),
    )


def redact(
    source: PathArg,
    target: PathArg,
    keep: Iterable[str] = frozenset(),
    *,
    map_path: PathArg | None = None,
    progress: RedactProgress | None = None,
) -> Redaction:
    """Write a copy of `source` that is safe to share, as `kvdiag redact` does.

    `target` is a NAME.tar.gz, .tgz, .tar or .zip, or a new (or empty) folder; it is
    written whole or not at all, with its REDACTED.md. `keep` names categories to leave as
    they are (`kvdiag redact --help` lists them). The mapping back to the originals is the
    record's `names`; `map_path` also writes it there (private, 0600; never inside the
    bundle), which the command line does by default.

    Raises NoInputError (no such source), NoSpaceError (a full disk), and ValueError for
    an unknown category, a folder that is not empty, or a mapping inside the bundle.
    """
    from kvdiag.redact.catalogue import category_names
    from kvdiag.redact.run import write_bundle

    kept = frozenset(keep)
    unknown = sorted(kept - set(category_names()))
    if unknown:
        raise ValueError(f"keep: no category {', '.join(unknown)} (there are: {category_names()})")
    source_path, bundle = _source(source)[0], Path(target)
    if bundle.is_dir() and any(bundle.iterdir()):
        raise ValueError(f"{bundle} is a folder that is not empty")
    mapping = None if map_path is None else Path(map_path)
    if mapping is not None:
        where = bundle.resolve()
        if where == mapping.resolve() or where in mapping.resolve().parents:
            raise ValueError("the mapping must not go inside the bundle")
    redaction = write_bundle(source_path, bundle, kept, progress)
    if mapping is not None:
        redaction.names.write_map(mapping, os.fspath(source))
    return redaction


def render(
    record: Diagnosis | BeforeAfter | Plan,
    fmt: OutputFormat | FormatName = OutputFormat.TEXT,
    *,
    color: bool = False,
) -> str:
    """A diagnosis, comparison or plan as one report: text, json, html or markdown.

    The same text the commands print or write with `-f FORMAT` (`color` adds the terminal
    report's ANSI colours). Raises ValueError for an unknown format, TypeError for
    anything but these three records.
    """
    out = OutputFormat(fmt)
    if isinstance(record, Diagnosis):
        from kvdiag.reports import render as render_diagnosis

        return render_diagnosis(record, out, color=color)
    if isinstance(record, BeforeAfter):
        from kvdiag.reports.comparison.render import render_compare

        return render_compare(record, out, color=color)
    if isinstance(record, Plan):
        from kvdiag.reports.plan.render import render_plan

        return render_plan(record, out, color=color)
    raise TypeError(f"render takes a Diagnosis, BeforeAfter or Plan, not {type(record).__name__}")


def series_frames(diagnosis: Diagnosis) -> dict[str, pl.DataFrame]:
    """The diagnosis' chart series as polars frames: one per series name (kv_cache_usage,
    num_requests_waiting, ...), a row per point of each replica, columns `replica`
    (String), `time` (Datetime, as the engine's clock printed it) and `value` (Float64).

    These are the points the reports chart, downsampled to a few hundred per replica; the
    full-resolution samples are in the database (`analyze(..., db=PATH)`, then `query`).
    Each series' unit and source are on its record in `diagnosis.series`.
    """
    import polars as pl

    rows: dict[str, list[tuple[str, str, float]]] = {}
    for s in diagnosis.series:
        rows.setdefault(s.name, []).extend((s.replica, t, v) for t, v in s.points)
    schema = {"replica": pl.String, "time": pl.String, "value": pl.Float64}
    return {
        name: pl.DataFrame(points, schema=schema, orient="row")
        .with_columns(pl.col("time").str.to_datetime(time_unit="ms"))
        .sort("replica", "time")
        for name, points in rows.items()
    }


def query(db: PathArg, sql: str, params: Sequence[Any] = ()) -> pl.DataFrame:
    """Run one SQL query on a database `analyze(..., db=PATH)` kept; the result as a polars
    frame. The database is opened read-only for the query and closed after it, so a
    notebook never holds it locked; `kvdiag tables` lists its tables and columns.

    Raises NoInputError when the file is not such a database; a query that fails (or
    tries to write) raises DuckDB's own error.
    """
    from kvdiag.analyzer.store.kept import KeptStore

    kept = KeptStore(Path(db))
    try:
        return kept.reader.sql(sql, list(params))
    finally:
        kept.close()


def connect(db: PathArg) -> Connection:
    """A read-only DuckDB connection to a database `analyze(..., db=PATH)` kept, for SQL of
    your own (`kvdiag tables` lists its tables and columns); close it when done. Raises
    NoInputError when the file is not such a database."""
    from kvdiag.analyzer.store.kept import open_read_only

    return open_read_only(Path(db))
