"""A crash loop: a real server.log replayed 50 times end to end, each copy 10 minutes later
(bench/make_incident.py's crash-loop shape), as a server restarted again and again leaves.

What kvdiag keeps of each start must not grow with the number of starts: the config rows it
stores and the facts read, the rows the rules cite. The verdict is the one copy's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.bench_support import load_bench
from tests.test_settings_roundtrip import fixture_settings

COPIES = 50


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One copy of the fixture's server.log, and the same log replayed COPIES times."""
    make_incident = load_bench("make_incident")
    log = make_incident.FIXTURE / "server.log"
    root = tmp_path_factory.mktemp("crash-loop")
    (root / "once").mkdir()
    shutil.copyfile(log, root / "once" / "server.log")
    make_incident.make_crashloop(root / "loop", COPIES * log.stat().st_size / 1e9)
    return {"once": root / "once", "loop": root / "loop"}


def _analysed(folder: Path) -> tuple[Diagnosis, Path]:
    db = folder.parent / f"{folder.name}.duckdb"
    done = analyze(AnalyzeOptions(incident=folder, db=db))
    return done.diagnosis, db


def _count(db: Path, query: str) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        (row,) = con.sql(query).fetchall()
    return int(row[0])


def test_the_loop_holds_every_start_and_the_one_verdict(runs: dict[str, Path]) -> None:
    loop = (runs["loop"] / "server.log").read_text()
    once = (runs["once"] / "server.log").read_text()
    assert loop.count("non-default args") == COPIES == COPIES * once.count("non-default args")
    (once_found, once_db), (loop_found, loop_db) = map(_analysed, (runs["once"], runs["loop"]))
    assert loop_found.verdict.primary == once_found.verdict.primary == "saturation"
    assert loop_found.verdict.classes == once_found.verdict.classes
    # Every start is read and kept as its own record: the engine's lines, the pool lines.
    engine_rows = "SELECT count(*) FROM log_engine"
    assert _count(loop_db, engine_rows) == COPIES * _count(once_db, engine_rows)
    pool_rows = "SELECT count(*) FROM log_kv_pool"
    assert _count(loop_db, pool_rows) == COPIES * _count(once_db, pool_rows)
    # Its configuration, restated at each start, is stored once.
    config_rows = "SELECT count(*) FROM config"
    assert _count(loop_db, config_rows) == _count(once_db, config_rows) > 0
    # The findings cite as many lines as for one start, not one per start.
    assert [len(f.evidence) for f in loop_found.findings] == [
        len(f.evidence) for f in once_found.findings
    ]


def test_the_facts_read_one_start_s_configuration(runs: dict[str, Path]) -> None:
    once = fixture_settings("once", runs["once"])
    loop = fixture_settings("loop", runs["loop"])
    # The rows the facts read: the first statement of each kind, the first copy's.
    assert loop["rows"] == once["rows"]
    assert loop == once
