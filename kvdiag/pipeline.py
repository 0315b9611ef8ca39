"""One analysis, end to end: discover -> ingest -> store -> facts -> rules -> diagnosis."""

from __future__ import annotations

import dataclasses
import functools
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kvdiag import __version__
from kvdiag._allocator import heap_for_batches
from kvdiag.analyzer import model as facts
from kvdiag.analyzer.discovery.discover import DEFAULT_REPLICA, Discovery, discover
from kvdiag.analyzer.ingest.base import Account, Emit, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.config.model_config import model_config_unit
from kvdiag.analyzer.ingest.readahead import ReadAhead
from kvdiag.analyzer.model.chart_series import build_series
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.progress import CHARTING, CHECKING, SAVING, Progress
from kvdiag.analyzer.store import timeline, validate
from kvdiag.analyzer.store.database import Store, StoreReader
from kvdiag.analyzer.store.kept import KeptStore
from kvdiag.domain.errors import NoInputError, NoSpaceError
from kvdiag.domain.records.diagnosis import Diagnosis, InputProblem, InputRecord
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.rules.engine import classify, fleet, missing, reconcile, rule_runner


@dataclass(frozen=True, slots=True)
class Analysis:
    diagnosis: Diagnosis
    db_path: Path | None
    timings: dict[str, float]  # seconds per phase: discover, ingest, facts, rules


class _Clock:
    """Seconds spent per phase, for `--timings` and the benchmarks."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.timings[phase] = round(now - self._last, 4)
        self._last = now


def _record(unit: InputUnit, acct: Account) -> InputRecord:
    # The file's own size; a series' account (its folder) has the unit's. No dict of the
    # unit's files: a day of scrapes would make 86,400 Paths for one lookup.
    try:
        size = unit.files[unit.rels.index(acct.path)].stat().st_size
    except ValueError:
        size = unit.size_bytes
    return InputRecord(
        path=acct.path,
        kind=unit.kind,
        status="used" if acct.records or acct.lines_parsed else "skipped",
        reason="" if acct.records or acct.lines_parsed else "nothing in it matched a known format",
        size_bytes=size,
        lines_total=acct.lines_total,
        lines_parsed=acct.lines_parsed,
        lines_unmatched=acct.lines_unmatched,
        lines_undecodable=acct.lines_undecodable,
        records=acct.records,
        notes=acct.notes,
        unmatched_templates=acct.templates,
    )


def _ingest_unit(
    unit: InputUnit, emits: Iterator[Emit], store: Store
) -> tuple[list[InputRecord], list[InputProblem]]:
    records: list[InputRecord] = []
    problems: list[InputProblem] = []
    try:
        for emit in emits:
            if isinstance(emit, TableBatch):
                store.append(emit.table, emit.frame, emit.series)
            elif isinstance(emit, InputProblem):
                problems.append(emit)
            else:
                records.append(_record(unit, emit))
        store.flush()
    except (KeyboardInterrupt, MemoryError, NoSpaceError):  # not this input's doing
        raise
    except Exception as exc:  # one unreadable input must not stop the others
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        problems.append(InputProblem(unit.rel, None, f"could not be read as {unit.kind}: {last}"))
        records.append(
            InputRecord(unit.rel, unit.kind, "skipped", f"reader failed: {last}", unit.size_bytes)
        )
    return records, problems


def _store_inputs(store: Store, records: list[InputRecord]) -> None:
    rows = [
        {
            "path": r.path,
            "kind": r.kind,
            "status": r.status,
            "reason": r.reason,
            "size_bytes": r.size_bytes,
            "lines_total": r.lines_total,
            "lines_parsed": r.lines_parsed,
            "lines_unmatched": r.lines_unmatched,
            "lines_undecodable": r.lines_undecodable,
            "records": r.records,
        }
        for r in records
    ]
    if rows:
        store.append("inputs", pl.DataFrame(rows))
    templates = [
        {
            "source_path": r.path,
            "template": t.template,
            "count": t.count,
            "first_line": t.first_line,
            "example": t.example,
        }
        for r in records
        for t in r.unmatched_templates
    ]
    if templates:
        store.append("unmatched_templates", pl.DataFrame(templates))


def _ingest_all(
    found: Discovery, opts: AnalyzeOptions, store: Store, progress: Progress | None
) -> tuple[list[InputRecord], list[InputProblem]]:
    # A kept database (--db) must stand without the files: it keeps every line's text.
    ctx = IngestContext(
        found.root,
        opts.year,
        found.anchor,
        found.anchor_source,
        text_by_reference=opts.db is None,
    )
    records: list[InputRecord] = list(found.set_aside)
    problems: list[InputProblem] = []
    with ReadAhead(found.units, ctx) as reading:
        for i, unit in enumerate(found.units):
            unit_ctx = ctx
            if progress is not None:
                report = functools.partial(progress.reading, i, len(found.units), unit)
                report(0, 0)
                unit_ctx = dataclasses.replace(ctx, progress=report)
            recs, probs = _ingest_unit(unit, reading.emits(i, unit_ctx), store)
            if progress is not None:  # its end, whether or not its reader tells progress
                report(unit.size_bytes, sum(r.lines_total for r in recs))
            records += recs
            problems += probs
    records.sort(key=lambda r: r.path)
    return records, problems


def _listed(
    records: Sequence[InputRecord], problems: Sequence[InputProblem] = (), limit: int = 10
) -> str:
    """Each file set aside and why, and the problems met: what exit code 3 explains."""
    lines = [f"  {r.path}: {r.status}: {'; '.join((r.reason, *r.notes))}" for r in records]
    lines += [f"  {p.path}:{p.line or ''} {p.message}" for p in problems]
    more = [f"  ... and {len(lines) - limit} more"] if len(lines) > limit else []
    return "".join(f"\n{line}" for line in lines[:limit] + more)


def _validate(store: Store) -> tuple[list[InputProblem], tuple[classify.Doubt, ...]]:
    """Set implausible rows aside, then check the cleaned store's times (before facts)."""
    flagged = validate.implausible_rows(store.reader)
    store.set_aside(flagged)
    ranged, range_doubts = validate.range_problems(flagged)
    timed, time_doubts = timeline.time_problems(store.reader)
    return [*ranged, *timed], range_doubts + time_doubts


def _tell(progress: Progress | None, phase: str) -> None:
    if progress is not None:
        progress.phase(phase)


def _with_model_config(found: Discovery, path: Path | None) -> Discovery:
    """--model-config PATH: one more input, read as a config.json whatever its content."""
    if path is None:
        return found
    if not path.is_file():
        raise NoInputError(f"--model-config {path}: no such file")
    unit = model_config_unit(path, found.root, DEFAULT_REPLICA)
    units = (*(u for u in found.units if unit.rel not in u.rels), unit)
    set_aside = tuple(r for r in found.set_aside if r.path != unit.rel)
    return dataclasses.replace(found, units=units, set_aside=set_aside)


# Up to this much input the scratch store is held in memory (Store's in_memory). DuckDB
# spills an in-memory database's tables to its temp directory past its memory limit, so a
# misjudged size costs speed, not memory; larger inputs get the file from the start.
SMALL_INPUT_BYTES = 32 << 20


def _input_bytes(found: Discovery) -> int:
    return sum(unit.size_bytes for unit in found.units)


def analyze(opts: AnalyzeOptions, progress: Progress | None = None) -> Analysis:
    """Run one analysis. Raises NoInputError when nothing could be ingested."""
    if not opts.incident.exists():
        raise NoInputError("no such file or folder", path=opts.incident)
    # Archives are unpacked here; the folder lives until the analysis is done.
    with tempfile.TemporaryDirectory(prefix="kvdiag-scratch-") as scratch:
        return _analyze(opts, Path(scratch), progress)


def _analyze(opts: AnalyzeOptions, scratch: Path, progress: Progress | None) -> Analysis:
    root = opts.incident
    clock = _Clock()
    seen = progress.found if progress is not None else None
    found = _with_model_config(discover(root, scratch, seen), opts.model_config)
    clock.lap("discover")
    if not found.units:
        raise NoInputError(
            f"no file in it is a known input ({len(found.set_aside)} set aside)"
            + _listed(found.set_aside),
            path=root,
        )
    name = opts.label or (root.name if root.is_dir() else root.stem)
    store = Store(opts.db, in_memory=_input_bytes(found) <= SMALL_INPUT_BYTES)
    try:
        with heap_for_batches():  # _allocator.py
            records, problems = _ingest_all(found, opts, store, progress)
        clock.lap("ingest")
        if not any(r.status == "used" for r in records):
            raise NoInputError(
                "nothing in it could be ingested" + _listed(records, problems), path=root
            )
        _tell(progress, CHECKING)
        _store_inputs(store, records)
        checked, doubts = _validate(store)
        problems += checked
        if problems:
            store.append(
                "input_problems",
                pl.DataFrame(
                    [{"path": p.path, "line": p.line, "message": p.message} for p in problems],
                    schema={"path": pl.String, "line": pl.Int64, "message": pl.String},
                ),
            )
        judging = store.reader
        diagnosis = _judge(judging, _Judged(name, tuple(records), problems, doubts), opts, clock)
        judging.release()
        _tell(progress, CHARTING)
        diagnosis = _with_series(diagnosis, store.reader, clock)
    except BaseException:
        store.discard()
        raise
    if opts.db is not None:
        _tell(progress, SAVING)
    db_path = store.finish()
    clock.lap("store")
    return Analysis(diagnosis, db_path, clock.timings)


@dataclass(frozen=True, slots=True)
class _Judged:
    """What the judgement needs besides the store: the inputs' account."""

    name: str
    records: tuple[InputRecord, ...]
    problems: list[InputProblem]
    doubts: tuple[classify.Doubt, ...]


def _judge(reader: StoreReader, got: _Judged, opts: AnalyzeOptions, clock: _Clock) -> Diagnosis:
    """Facts, rules, verdict and fleet from a complete store (the charts come after)."""
    established = facts.establish(reader)
    incident = Incident(reader, established)
    absent = missing.missing_evidence(incident)
    clock.lap("facts")
    result = rule_runner.run_rules(incident, opts)
    verdict = classify.classify(result.findings, established, absent, result.ruled_out, got.doubts)
    fleet_verdicts = fleet.replica_verdicts(
        fleet.FleetInput(incident, result.findings, absent, opts)
    )
    clock.lap("rules")
    return Diagnosis(
        incident=got.name,
        verdict=verdict,
        findings=result.findings,
        facts=established,
        inputs=got.records,
        input_problems=tuple(got.problems),
        missing_evidence=absent,
        rules=result.runs,
        engine_problems=result.problems,
        reconciliation=reconcile.layers(result, absent),
        fleet=fleet_verdicts,
        kvdiag_version=__version__,
    )


def _with_series(diagnosis: Diagnosis, reader: StoreReader, clock: _Clock) -> Diagnosis:
    # A reader of its own: the frames the rules shared (a day of load points is hundreds
    # of MB) were let go (StoreReader.release) before the charts are read.
    series, window = build_series(reader)
    clock.lap("series")
    return dataclasses.replace(diagnosis, series=series, window=window)


def analyze_kept(db: Path, opts: AnalyzeOptions) -> Analysis:
    """Judge again a database an earlier `analyze --db` kept, without its files.

    The inputs' account is the one stored then (without per-file notes); rule selection and
    thresholds are this run's. Raises NoInputError when the file is not such a database.
    """
    clock = _Clock()
    kept = KeptStore(db)
    try:
        reader = kept.reader
        got = _Judged(opts.label or db.stem, *_kept_account(reader))
        diagnosis = _judge(reader, got, opts, clock)
        reader.release()
        diagnosis = _with_series(diagnosis, kept.reader, clock)
    finally:
        kept.close()
    return Analysis(diagnosis, db, clock.timings)


def _kept_account(
    reader: StoreReader,
) -> tuple[tuple[InputRecord, ...], list[InputProblem], tuple[classify.Doubt, ...]]:
    """The inputs, problems and doubts of a kept database, as the first run found them."""
    records = tuple(
        InputRecord(**r) for r in reader.sql("SELECT * FROM inputs ORDER BY path").to_dicts()
    )
    problems = [
        InputProblem(r["path"], r["line"], r["message"])
        for r in reader.sql("SELECT path, line, message FROM input_problems").to_dicts()
    ]
    flagged = reader.sql("SELECT * FROM implausible_values")
    _, range_doubts = validate.range_problems(flagged)
    _, time_doubts = timeline.time_problems(reader)
    return records, problems, range_doubts + time_doubts
