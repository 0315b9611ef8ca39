"""How the vLLM log ingester dates lines and groups files: year sources, the 12-31 -> 01-01
rollover, rotated and gzipped sets, pod prefixes, and the `kvdiag formats` command."""

from __future__ import annotations

import gzip
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.base import Account, IngestContext, TableBatch
from kvdiag.analyzer.ingest.logs.batch import count_lines
from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.logs.steps import lines_frame, parse_batch
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester, _FileState
from tests.conftest import FIXTURES, run_cli

_STATS = (
    "{prefix}INFO {md} {hms} [loggers.py:248] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 50.0 tokens/s, Running: {running} reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 40.0%, Prefix cache hit rate: 0.0%"
)


def stats_line(md: str, hms: str, running: int = 1, prefix: str = "") -> str:
    return _STATS.format(prefix=prefix, md=md, hms=hms, running=running)


def read(folder: Path, **ctx: object) -> tuple[pl.DataFrame, list[Account]]:
    """Discover a folder, ingest its one vLLM unit, return its stats rows and accounts."""
    found = discover(folder)
    (unit,) = found.units
    context = IngestContext(
        found.root,
        ctx.get("year"),  # type: ignore[arg-type]
        ctx.get("anchor", found.anchor),  # type: ignore[arg-type]
        ctx.get("anchor_source", found.anchor_source),  # type: ignore[arg-type]
    )
    frames, accounts = [], []
    for emit in VllmLogIngester().ingest(unit, context):
        if isinstance(emit, TableBatch) and emit.table == "log_stats":
            frames.append(emit.frame)
        elif isinstance(emit, Account):
            accounts.append(emit)
    return pl.concat(frames), accounts


def write(path: Path, lines: list[str], mtime: datetime | None = None) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    if mtime is not None:
        os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return path


def test_container_timestamp_gives_the_year_and_the_time(tmp_path: Path) -> None:
    write(
        tmp_path / "server.log",
        [stats_line("12-31", "15:59:58", prefix="2024-12-31T23:59:58.5Z (APIServer pid=1) ")],
    )
    stats, (acct,) = read(tmp_path, year=2030)
    assert stats["ts"].to_list() == [datetime(2024, 12, 31, 23, 59, 58, 500000)]
    assert stats["ts_raw"].to_list() == ["12-31 15:59:58"]  # the server's own clock, as printed
    assert "year 2024 from container timestamp (server.log:1)" in acct.notes


def test_year_option_comes_before_anchor_and_mtime(tmp_path: Path) -> None:
    write(
        tmp_path / "server.log", [stats_line("03-02", "10:00:00")], datetime(2026, 5, 1, tzinfo=UTC)
    )
    stats, (acct,) = read(tmp_path, year=2023, anchor=datetime(2025, 3, 2), anchor_source="x")
    assert stats["ts"].dt.year().to_list() == [2023]
    assert "year 2023 from --year option" in acct.notes


def test_time_anchor_picks_the_nearest_year(tmp_path: Path) -> None:
    write(tmp_path / "server.log", [stats_line("12-31", "23:00:00")])
    anchor = datetime(2025, 1, 2, 8, 0)
    stats, (acct,) = read(tmp_path, anchor=anchor, anchor_source="scrape file names")
    assert stats["ts"].dt.year().to_list() == [2024]
    assert acct.notes[0] == "year 2024 from scrape file names (2025-01-02)"


def test_mtime_never_dates_a_line_after_the_last_write(tmp_path: Path) -> None:
    mtime = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    write(tmp_path / "server.log", [stats_line("11-20", "10:00:00")], mtime)
    stats, (acct,) = read(tmp_path)
    assert stats["ts"].dt.year().to_list() == [2025]
    assert acct.notes[0] == "year 2025 from modification time of server.log (2026-03-01)"


def test_new_year_inside_a_file_advances_the_year(tmp_path: Path) -> None:
    lines = [stats_line("12-31", "23:59:50", 1), stats_line("01-01", "00:00:00", 2)]
    write(tmp_path / "server.log", lines)
    stats, (acct,) = read(tmp_path, year=2024)
    assert stats.sort("source_line")["ts"].to_list() == [
        datetime(2024, 12, 31, 23, 59, 50),
        datetime(2025, 1, 1, 0, 0, 0),
    ]
    assert "1 year rollover(s) (12-31 -> 01-01)" in acct.notes[0]


def test_rotated_set_is_one_unit_read_oldest_first_across_the_new_year(tmp_path: Path) -> None:
    write(tmp_path / "vllm.log.2.gz", [stats_line("12-31", "23:59:40", 1)])
    write(
        tmp_path / "vllm.log.1",
        [stats_line("12-31", "23:59:50", 2), stats_line("01-01", "00:00:00", 3)],
    )
    write(tmp_path / "vllm.log", [stats_line("01-01", "00:00:10", 4)])
    stats, accounts = read(tmp_path, year=2024)
    assert [a.path for a in accounts] == ["vllm.log.2.gz", "vllm.log.1", "vllm.log"]
    assert all(a.balanced() and a.lines_parsed == a.lines_total for a in accounts)
    ordered = stats.sort("ts")
    assert ordered["running"].to_list() == [1, 2, 3, 4]
    assert ordered["source_path"].to_list() == [
        "vllm.log.2.gz",
        "vllm.log.1",
        "vllm.log.1",
        "vllm.log",
    ]
    assert ordered["ts"][-1] == datetime(2025, 1, 1, 0, 0, 10)


def test_pod_prefix_names_the_replica(tmp_path: Path) -> None:
    write(
        tmp_path / "all.log",
        [
            stats_line("05-01", "10:00:00", prefix="[pod/vllm-0/vllm] "),
            stats_line("05-01", "10:00:00", prefix="[pod/vllm-1/vllm] "),
        ],
    )
    stats, _ = read(tmp_path, year=2026)
    assert sorted(stats["replica"].to_list()) == ["vllm-0", "vllm-1"]


def test_formats_command_reports_coverage_and_unmatched_shapes(tmp_path: Path) -> None:
    log = write(
        tmp_path / "server.log",
        [stats_line("05-01", "10:00:00"), "something new 1234", "something new 5678"],
    )
    out = run_cli("formats", str(log)).stdout
    assert "3 lines, coverage 33.3% (1 parsed, 2 unmatched, 0 undecodable)" in out
    assert "      2  line 2       something new 1234" in out
    (doc,) = json.loads(run_cli("formats", str(log), "--format", "json").stdout)
    assert doc["templates"][0]["template"] == "something new <N>"
    assert doc["coverage"] == 1 / 3


def test_formats_command_reads_a_fixture_folder() -> None:
    result = run_cli(
        "formats", str(FIXTURES / "vllm-b-saturation" / "incident"), "--format", "json"
    )
    docs = {d["path"]: d for d in json.loads(result.stdout)}
    assert docs["server.log"]["coverage"] == 1.0
    assert docs["server.log"]["kind"] == "vllm_log"


def test_glued_record_with_a_process_prefix_is_split_but_a_logging_prefix_is_not(
    tmp_path: Path,
) -> None:
    first = stats_line("05-01", "10:00:00", 1, prefix="(APIServer pid=7) ")
    glued = first + stats_line("05-01", "10:00:10", 2, prefix="(APIServer pid=7) ")
    write(tmp_path / "server.log", [glued, stats_line("05-01", "10:00:20", 3, prefix="[vllm]")])
    stats, (acct,) = read(tmp_path, year=2026)
    ordered = stats.sort("ts")
    assert ordered["running"].to_list() == [1, 2, 3]
    assert ordered["source_line"].to_list() == [1, 1, 2]
    assert ordered["process"].to_list() == ["APIServer", "APIServer", None]
    assert ordered["repair"].to_list() == ["split glued line", "split glued line", None]
    assert acct.lines_parsed == acct.lines_total == 2


_PIECES = st.sampled_from(
    [
        "INFO 05-01 10:00:00 [loggers.py:1] ",
        "(Worker_TP1 pid=9) ",
        "Engine 000: Avg prompt throughput: 1.0 tokens/s, ",
        "Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 5.0%",
        "GPU KV cache size: 1,024 tokens",
        "\x1b[32m",
        "\r",
        "\\",
        '  File "x.py", line 1',
        "\ufffd",
        ' - "GET / HTTP/1.1" 200',
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_PIECES | st.text(max_size=12), max_size=5).map("".join), max_size=12))
def test_any_lines_are_accounted_for(lines: list[str]) -> None:
    """Whatever the lines hold, each is parsed, unmatched or undecodable, exactly once."""
    state = _FileState()
    batch = lines_frame([line.replace("\n", " ") for line in lines])
    state.add_counts(count_lines(batch.height, parse_batch(batch, load_pack("vllm_log"))))
    acct = state.account("x.log", None)
    assert acct.lines_total == len(lines)
    assert acct.balanced()
