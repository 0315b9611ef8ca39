"""Lines stored by reference: the fast lane's stats rows leave `raw` NULL while the store is
temporary, and every such line reads back from its file exactly as it would have been kept."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from kvdiag.analyzer.ingest.base import IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester
from kvdiag.analyzer.store.database import Store
from kvdiag.analyzer.text import lines as line_reader
from kvdiag.cli.main import cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-b-saturation" / "incident"
LOG = FIXTURE / "server.log"


def _ingest(path: Path, by_reference: bool) -> dict[str, pl.DataFrame]:
    unit = InputUnit("vllm_log", path.name, (path,), (path.name,), path.stat().st_size, "r")
    ctx = IngestContext(path.parent, 2026, None, None, text_by_reference=by_reference)
    frames: dict[str, list[pl.DataFrame]] = defaultdict(list)
    for emit in VllmLogIngester().ingest(unit, ctx):
        if isinstance(emit, TableBatch):
            frames[emit.table].append(emit.frame)
    return {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in frames.items()}


def _read_back(tables: dict[str, pl.DataFrame], rows: pl.DataFrame) -> list[str | None]:
    store = Store()
    try:
        for name, frame in tables.items():
            store.append(name, frame)
        reader = store.reader
        return [reader.line_text(p, n) for p, n in rows.select("source_path", "source_line").rows()]
    finally:
        store.discard()


def _kept_and_referenced(path: Path) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    kept = _ingest(path, by_reference=False)["log_stats"].sort("source_line")
    return kept, _ingest(path, by_reference=True)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of ~4 KB: a line is looked up across many blocks, not in the first."""
    monkeypatch.setattr(line_reader, "BATCH_BYTES", 4096)


@pytest.mark.usefixtures("small_batches")
def test_stats_lines_read_back_as_they_would_have_been_kept() -> None:
    kept, tables = _kept_and_referenced(LOG)
    referenced = tables["log_stats"].sort("source_line")
    assert referenced.height == kept.height > 10
    assert referenced["raw"].null_count() == referenced.height  # all from the fast lane
    assert kept["raw"].null_count() == 0
    assert _read_back(tables, referenced) == kept["raw"].to_list()
    # Everything but the text is stored as before.
    assert referenced.drop("raw").equals(kept.drop("raw"))


@pytest.mark.usefixtures("small_batches")
def test_blocks_cover_the_file_line_by_line_and_byte_by_byte() -> None:
    blocks = _ingest(LOG, by_reference=True)["line_blocks"].sort("first_line")
    assert blocks.height > 10
    assert blocks["first_line"][0] == 1 and blocks["byte_offset"][0] == 0
    ends = blocks.select(
        (pl.col("first_line") + pl.col("lines")).alias("next_line"),
        (pl.col("byte_offset") + pl.col("byte_length")).alias("next_byte"),
    )
    assert ends["next_line"][:-1].to_list() == blocks["first_line"][1:].to_list()
    assert ends["next_byte"][:-1].to_list() == blocks["byte_offset"][1:].to_list()
    assert int(blocks["lines"].sum()) == LOG.read_bytes().count(b"\n")
    assert ends["next_byte"][-1] == LOG.stat().st_size
    assert set(blocks["file_path"]) == {str(LOG.resolve())}


def _damaged_copy(tmp: Path) -> tuple[Path, list[int]]:
    """The fixture's log with CRLF endings, a unit separator inside one stats line, a
    non-ASCII process name in another and invalid UTF-8 in a third's: their numbers."""
    lines = LOG.read_bytes().split(b"\n")
    stats = [i for i, line in enumerate(lines) if b"Avg prompt throughput" in line][:3]
    lines[stats[0]] = lines[stats[0]].replace(b"(APIServer", b"(API\x1fServer", 1)
    lines[stats[1]] = lines[stats[1]].replace(b"(APIServer", b"(APIServ\xc3\xa9r", 1)
    lines[stats[2]] = lines[stats[2]].replace(b"(APIServer", b"(APIServ\xffr", 1)
    path = tmp / "server.log"
    path.write_bytes(b"\r\n".join(lines))
    return path, [i + 1 for i in stats]


def test_damaged_lines_read_back_as_the_reader_read_them(tmp_path: Path) -> None:
    path, numbers = _damaged_copy(tmp_path)
    kept, tables = _kept_and_referenced(path)
    referenced = tables["log_stats"].sort("source_line")
    assert referenced.height == kept.height
    back = _read_back(tables, referenced)
    stored = referenced["raw"].to_list()
    # A line the reader could not decode keeps its text; every other reads back the same.
    assert [b if s is None else s for b, s in zip(back, stored, strict=True)] == kept[
        "raw"
    ].to_list()
    assert set(numbers) <= set(referenced["source_line"])
    by_reference = set(referenced.filter(pl.col("raw").is_null())["source_line"])
    assert {numbers[0], numbers[1]} <= by_reference
    invalid = referenced.filter(pl.col("source_line") == numbers[2])
    assert invalid["raw"].null_count() == 0 and "\ufffd" in invalid["raw"][0]


def test_a_missing_file_or_block_gives_no_text(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(LOG.read_bytes())
    tables = _ingest(path, by_reference=True)
    row = tables["log_stats"].head(1)
    past = row.with_columns(pl.lit(10**9).alias("source_line"))
    assert _read_back(tables, past) == [None]
    path.unlink()
    assert _read_back(tables, row) == [None]


def test_a_kept_database_holds_every_line_s_text(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    result = CliRunner().invoke(cli, ["analyze", str(FIXTURE), "--db", str(db), "-q"])
    assert result.exit_code in (0, 1), result.output
    con = duckdb.connect(str(db), read_only=True)
    try:
        nulls, total = con.execute(
            "SELECT count(*) - count(raw), count(*) FROM log_stats"
        ).fetchone()
        blocks = con.execute("SELECT count(*) FROM line_blocks").fetchone()
    finally:
        con.close()
    assert total > 10 and nulls == 0
    assert blocks == (0,)


def test_the_context_keeps_text_unless_told() -> None:
    ctx = IngestContext(FIXTURE, None, None, None)
    assert ctx.text_by_reference is False
    assert dataclasses.replace(ctx, text_by_reference=True).text_by_reference
