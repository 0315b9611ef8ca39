"""One side of a comparison: analysed as `kvdiag analyze` would, then read once more for
its load and settings.

A side is an incident folder, an archive or a single file (analysed into a scratch
database kept for the comparison's length), or a database an earlier `analyze --db`
kept (judged again, with this run's rule options, without its files).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from kvdiag.analyzer.model.incident import kept_incident
from kvdiag.analyzer.model.profile import Profile
from kvdiag.analyzer.model.stated import Stated
from kvdiag.analyzer.progress import Progress
from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze, analyze_kept

DUCKDB_MAGIC = b"DUCK"  # at byte 8 of every DuckDB database file


@dataclass(frozen=True, slots=True)
class RunEvidence:
    """What the comparison needs of one run."""

    label: str
    diagnosis: Diagnosis
    profile: Profile
    settings: dict[str, Stated]


def is_kept_database(path: Path) -> bool:
    """A DuckDB file (what `analyze --db` keeps), told by its header, not its name."""
    if not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(12)[8:12] == DUCKDB_MAGIC


def read_run(
    path: Path, opts: AnalyzeOptions, scratch: Path, progress: Progress | None = None
) -> RunEvidence:
    """Analyse one side and read its load and settings. Raises NoInputError as analyze does."""
    if is_kept_database(path):
        db = path
        diagnosis = analyze_kept(path, dataclasses.replace(opts, incident=path)).diagnosis
    else:
        db = scratch / f"{len(list(scratch.iterdir()))}.duckdb"
        result = analyze(dataclasses.replace(opts, incident=path, db=db), progress)
        diagnosis = result.diagnosis
    with kept_incident(db, diagnosis.facts) as incident:
        return RunEvidence(
            opts.label or diagnosis.incident,
            diagnosis,
            incident.profile(),
            incident.stated_settings(),
        )
