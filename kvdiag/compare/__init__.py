"""`kvdiag compare BEFORE AFTER`: did the change fix the incident, at the same load?

sides.py analyses each run and reads its load and settings; judge.py lines the two up;
remedies.py checks BEFORE's remedies against AFTER; outcome.py names the outcome and says it
in one sentence. The result is one `BeforeAfter` record (record.py) that every output format
renders.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from kvdiag import __version__
from kvdiag.analyzer.progress import Progress
from kvdiag.compare import judge, outcome, remedies
from kvdiag.compare.sides import RunEvidence, read_run
from kvdiag.domain.records.comparison import BeforeAfter, Outcome, Side
from kvdiag.domain.records.options import AnalyzeOptions

__all__ = ["BeforeAfter", "Outcome", "compare_paths", "compare_runs"]


def compare_paths(
    before: Path,
    after: Path,
    opts: AnalyzeOptions,
    progress: Progress | None = None,
    labels: tuple[str, str] | None = None,
) -> BeforeAfter:
    """Analyse both runs and compare them. Raises NoInputError for a side that cannot be read.
    `labels` name the runs in the reports (default: the paths as given)."""
    names = labels or (str(before), str(after))
    with tempfile.TemporaryDirectory(prefix="kvdiag-compare-") as scratch:
        runs = [
            read_run(path, dataclasses.replace(opts, label=name), Path(scratch), progress)
            for path, name in zip((before, after), names, strict=True)
        ]
    return compare_runs(*runs)


def _engine(run: RunEvidence) -> str:
    engine = run.diagnosis.facts.get("engine")
    value = engine.value if engine is not None and not isinstance(engine, tuple) else None
    return str(value) if value else "vllm"


def compare_runs(before: RunEvidence, after: RunEvidence) -> BeforeAfter:
    """The comparison record of two analysed runs."""
    load = judge.compare_load(before, after)
    outcomes = judge.compare_outcomes(before, after, load.same_load)
    changes = judge.setting_changes(before, after)
    decided, reasons = outcome.decide(before.diagnosis, after.diagnosis, load, outcomes)
    return BeforeAfter(
        before=Side(before.label, before.diagnosis, before.profile.load_start),
        after=Side(after.label, after.diagnosis, after.profile.load_start),
        load=load,
        changes=changes,
        layers=judge.compare_layers(before.diagnosis, after.diagnosis),
        outcomes=outcomes,
        remedies=remedies.check_remedies(
            before.diagnosis, after.diagnosis, before.settings, after.settings, _engine(before)
        ),
        outcome=decided,
        summary=outcome.summary(
            decided, before.diagnosis, after.diagnosis, load, changes, outcomes, reasons
        ),
        reasons=tuple(reasons),
        kvdiag_version=__version__,
    )
