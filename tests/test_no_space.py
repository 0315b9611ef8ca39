"""A full disk stops the run with exit 5 and what to do, and leaves no file behind.

The real cases fill a small tmpfs (mounting one needs root; elsewhere they skip and say
why). Before: a full TMPDIR was blamed on the input being read ("reader failed") and every
later input set aside the same way; under --db, DuckDB kept quiet when the last checkpoint
could not be written and the run handed over a database file without its tables.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from kvdiag.analyzer.store import database as store_module
from kvdiag.analyzer.store.errors import duckdb_errors
from kvdiag.domain.errors import NoSpaceError
from kvdiag.domain.exitcodes import ExitCode
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import SMALL_INPUT_BYTES, analyze
from tests.conftest import FIXTURES

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"


def _mount(folder: Path, size: str) -> None:
    subprocess.run(["umount", str(folder)], capture_output=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here (needs root): {done.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, object]]:
    """A folder on a tmpfs; the second item mounts it anew at another size."""
    folder = tmp_path / "disk"
    folder.mkdir()
    try:
        yield folder, lambda size: _mount(folder, size)
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def _kvdiag(
    *args: str, tmpdir: Path | None = None, incident: Path = SATURATION
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1")
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    cmd = [sys.executable, "-m", "kvdiag", "analyze", str(incident), "-q", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _past_small_input(folder: Path) -> Path:
    """The saturation run's log, repeated past the size whose scratch store is held in
    memory (pipeline.SMALL_INPUT_BYTES): this store is a file in TMPDIR."""
    text = (SATURATION / "server.log").read_bytes()
    folder.mkdir()
    (folder / "server.log").write_bytes(text * (SMALL_INPUT_BYTES // len(text) + 1))
    return folder


def test_a_full_tmpdir_stops_the_run_and_says_so(small_disk, tmp_path: Path) -> None:
    disk, mount = small_disk
    mount("2m")  # the scratch store of 32 MB of log needs more
    incident = _past_small_input(tmp_path / "incident")
    report = tmp_path / "report.json"
    done = _kvdiag("-f", "json", "-o", str(report), tmpdir=disk, incident=incident)
    assert done.returncode == ExitCode.NO_SPACE, done.stderr
    assert "disk is full" in done.stderr and "No space left on device" in done.stderr
    assert f"TMPDIR ({disk})" in done.stderr
    assert "reader failed" not in done.stderr  # not blamed on the input
    assert not report.exists()
    assert not list(disk.iterdir())  # the scratch store is gone


def test_a_small_input_needs_no_room_in_tmpdir(small_disk, tmp_path: Path) -> None:
    """Its scratch store is held in memory (pipeline.SMALL_INPUT_BYTES)."""
    disk, mount = small_disk
    mount("64k")
    report = tmp_path / "report.json"
    done = _kvdiag("-f", "json", "-o", str(report), tmpdir=disk)
    assert done.returncode == ExitCode.FINDINGS, done.stderr
    assert report.exists()
    assert not list(disk.iterdir())


def test_a_full_disk_at_the_last_checkpoint_leaves_no_database(small_disk) -> None:
    disk, mount = small_disk
    mount("8m")  # room for the write-ahead log (5 MB), not for the checkpoint after it
    db = disk / "incident.duckdb"
    done = _kvdiag("-f", "json", "--db", str(db))
    assert done.returncode == ExitCode.NO_SPACE, done.stderr
    assert "disk is full" in done.stderr
    assert not list(disk.iterdir())  # neither the database nor its .partial or .wal


def test_with_room_the_database_holds_its_tables(small_disk) -> None:
    disk, mount = small_disk
    mount("20m")
    db = disk / "incident.duckdb"
    done = _kvdiag("-f", "json", "--db", str(db))
    assert done.returncode == ExitCode.FINDINGS, done.stderr
    assert [p.name for p in disk.iterdir()] == ["incident.duckdb"]
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.sql("SELECT count(*) FROM log_stats").fetchall() == [(17,)]  # NOTES.md
    finally:
        con.close()


def test_a_report_on_a_full_disk_is_not_written(small_disk) -> None:
    disk, mount = small_disk
    mount("32k")  # the HTML report is ~60 KB
    report = disk / "report.html"
    done = _kvdiag("-f", "html", "-o", str(report))
    assert done.returncode == ExitCode.NO_SPACE, done.stderr
    assert "its disk is full, no report written" in done.stderr
    assert not list(disk.iterdir())


def test_any_duckdb_error_naming_a_full_disk_is_no_space_error() -> None:
    said = 'Could not write file "/x/incident.duckdb.wal": No space left on device'
    for error in (duckdb.IOException, duckdb.TransactionException, duckdb.FatalException):
        with pytest.raises(NoSpaceError, match="disk is full"), duckdb_errors():
            raise error(said)
    with pytest.raises(duckdb.IOException), duckdb_errors():
        raise duckdb.IOException("Could not read file: Permission denied")


def test_a_full_disk_while_storing_ends_the_run_and_leaves_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also where no tmpfs can be mounted: every insert fails as DuckDB does on ENOSPC."""

    def full(self: store_module.Store, table_name: str) -> None:
        with duckdb_errors():
            raise duckdb.IOException(
                f'Could not write file "{table_name}": No space left on device'
            )

    monkeypatch.setattr(store_module.Store, "_flush_table", full)
    made: list[Path] = []
    real = store_module.Store.__init__

    def tracked(self: store_module.Store, keep_at: Path | None = None, **kw: bool) -> None:
        real(self, keep_at, **kw)
        made.append(self._path)

    monkeypatch.setattr(store_module.Store, "__init__", tracked)
    with pytest.raises(NoSpaceError):
        analyze(AnalyzeOptions(incident=SATURATION, db=tmp_path / "kept.duckdb"))
    assert made and not made[0].exists()
    assert not list(tmp_path.iterdir())


def test_a_full_disk_in_a_rules_query_is_not_a_rule_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule that meets a full disk (DuckDB spilling its query) ends the run: a report
    listing it as crashed would look complete and be short of its findings."""
    from kvdiag.rules import RULES

    def full(self: object, ctx: object) -> None:
        raise NoSpaceError("the database's disk is full")

    monkeypatch.setattr(RULES[0], "check", full)
    with pytest.raises(NoSpaceError):
        analyze(AnalyzeOptions(incident=SATURATION))
