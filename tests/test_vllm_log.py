"""The vLLM log ingester on the real logs of ../shared/realdata: accounting, pool sizes,
repairs, stats values read independently, start-up refusals."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import classify_file
from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.logs.steps import lines_frame, parse_batch
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester
from kvdiag.analyzer.store.database import Store
from kvdiag.analyzer.text import lines as line_reader
from kvdiag.analyzer.text.lines import read_head
from tests.conftest import REALDATA, shared


def real_logs() -> list[str]:
    """Every vLLM log under ../shared/realdata (relative names), or one skipping param."""
    if not REALDATA.exists():
        return ["<absent>"]
    found = sorted(REALDATA.glob("issues/vllm-*.log")) + sorted(
        REALDATA.glob("vllm-cpu/*/server.log")
    )
    return [p.relative_to(REALDATA).as_posix() for p in found]


def real(rel: str) -> Path:
    return shared("realdata", *rel.split("/"))


def ingest(*paths: Path, year: int | None = 2026) -> tuple[dict[str, pl.DataFrame], list[Account]]:
    """Run the ingester on files forming one unit; tables concatenated, one account each."""
    unit = InputUnit(
        "vllm_log",
        paths[0].name,
        paths,
        tuple(p.name for p in paths),
        sum(p.stat().st_size for p in paths),
        "replica-a",
    )
    ctx = IngestContext(paths[0].parent, year, None, None)
    frames: dict[str, list[pl.DataFrame]] = defaultdict(list)
    accounts = []
    for emit in VllmLogIngester().ingest(unit, ctx):
        if isinstance(emit, TableBatch):
            frames[emit.table].append(emit.frame)
        elif isinstance(emit, Account):
            accounts.append(emit)
    tables = {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in frames.items()}
    return tables, accounts


def rows(tables: dict[str, pl.DataFrame], table: str, event: str | None = None) -> pl.DataFrame:
    frame = tables.get(table, pl.DataFrame())
    return frame.filter(pl.col("event") == event) if event else frame


@pytest.mark.parametrize("rel", real_logs())
def test_every_real_log_is_accounted_for_line_by_line(rel: str) -> None:
    path = real(rel)
    data = path.read_bytes()
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    _, (acct,) = ingest(path)
    assert acct.lines_total == lines
    assert acct.balanced(), acct
    assert acct.lines_undecodable == 0


@pytest.mark.parametrize("rel", real_logs())
def test_every_real_log_is_recognised_as_a_vllm_log(rel: str) -> None:
    path = real(rel)
    ingester, why = classify_file(path.name, read_head(path))
    assert ingester is VllmLogIngester, why


def test_other_engines_logs_are_not_taken_for_vllm() -> None:
    others = sorted(shared("realdata", "issues").glob("sglang-*.log"))
    others += sorted(shared("realdata", "issues").glob("tgi-*.log"))
    assert others
    for path in others:
        ingester, _ = classify_file(path.name, read_head(path))
        assert ingester is not VllmLogIngester, path.name


# What each start-up fragment's text says about its pool: (file, event, fields).
POOL_LINES = [
    ("issues/vllm-v0-maxlen-kv-1.log", "gpu_blocks", {"blocks": 1952, "cpu_blocks": 2048}),
    (
        "issues/vllm-v0-maxlen-kv-1.log",
        "max_concurrency",
        {"max_model_len": 20000, "concurrency": 1.56},
    ),
    (
        "issues/vllm-v0-memprofile-multiline-3.log",
        "gpu_blocks",
        {"blocks": 5691, "cpu_blocks": 2048},
    ),
    (
        "issues/vllm-v0-memprofile-multiline-3.log",
        "max_concurrency",
        {"max_model_len": 8192, "concurrency": 11.12},
    ),
    ("issues/vllm-v1-gpublocks-pr-1.log", "gpu_blocks", {"blocks": 127626}),
    (
        "issues/vllm-v1-gpublocks-pr-1.log",
        "max_concurrency",
        {"max_model_len": 2048, "concurrency": 997.08},
    ),
    ("issues/vllm-v1-kvsize-pr-2.log", "kv_cache_size", {"tokens": 2042016, "device": "GPU"}),
    (
        "issues/vllm-v1-kvsize-pr-2.log",
        "max_concurrency",
        {"max_model_len": 2048, "concurrency": 997.08},
    ),
    ("issues/vllm-v1-kvsize-enginecore-1.log", "available_kv_memory", {"gib": 6.51}),
    ("issues/vllm-v1-kvsize-enginecore-1.log", "kv_cache_size", {"tokens": 42656}),
    (
        "issues/vllm-v1-kvsize-enginecore-1.log",
        "max_concurrency",
        {"max_model_len": 32768, "concurrency": 1.30},
    ),
    ("issues/vllm-v1-kvsize-fp8-4.log", "available_kv_memory", {"gib": 10.55}),
    ("issues/vllm-v1-kvsize-fp8-4.log", "kv_cache_size", {"tokens": 230528}),
    (
        "issues/vllm-v1-kvsize-fp8-4.log",
        "max_concurrency",
        {"max_model_len": 100000, "concurrency": 2.31},
    ),
    ("issues/vllm-v1-kvsize-vs-sglang-3.log", "available_kv_memory", {"gib": 8.11}),
    ("issues/vllm-v1-kvsize-vs-sglang-3.log", "kv_cache_size", {"tokens": 178880}),
    ("vllm-cpu/a-healthy/server.log", "cpu_kv_space", {"gib": 1.0, "total_gib": 9.21}),
    (
        "vllm-cpu/a-healthy/server.log",
        "kv_cache_size",
        {"device": "CPU", "tokens": 524288, "max_model_len": 4096, "concurrency": 128.0},
    ),
    ("vllm-cpu/b-saturation/server.log", "cpu_kv_space", {"gib": 0.02, "total_gib": 9.96}),
    (
        "vllm-cpu/b-saturation/server.log",
        "kv_cache_size",
        {"device": "CPU", "tokens": 8704, "max_model_len": 4096, "concurrency": 2.12},
    ),
    ("vllm-cpu/c-prefill-peak-noprefix/server.log", "kv_cache_size", {"tokens": 8192}),
    ("vllm-cpu/c2-prefill-peak-prefix/server.log", "kv_cache_size", {"tokens": 8192}),
    ("vllm-cpu/e-startup-refusal/server.log", "cpu_kv_space", {"gib": 0.0, "total_gib": 9.96}),
]
MEMORY_LINES = [
    ("issues/vllm-v0-maxlen-kv-1.log", {"kv_gib": 3.81, "total_gib": 23.58, "utilization": 0.9}),
    (
        "issues/vllm-v0-memprofile-multiline-3.log",
        {"kv_gib": 11.12, "requested_gib": 35.55, "weights_gib": 14.96, "activation_gib": 9.37},
    ),
    ("issues/vllm-v0-memprofile-table-pr-4.log", {"kv_gib": 53.29, "requested_gib": 71.29}),
    (
        "issues/vllm-v0-vllmworkerprocess-memprofile-5.log",
        {"total_gib": 23.55, "requested_gib": 21.19},
    ),
]


@pytest.mark.parametrize(("rel", "event", "want"), POOL_LINES, ids=lambda v: str(v)[:40])
def test_startup_fragment_pool_size_is_what_its_text_says(
    rel: str, event: str, want: dict[str, float | int | str]
) -> None:
    tables, _ = ingest(real(rel))
    (row,) = rows(tables, "log_kv_pool", event).iter_rows(named=True)
    for field, value in want.items():
        assert row[field] == (pytest.approx(value) if isinstance(value, float) else value), field


@pytest.mark.parametrize(("rel", "want"), MEMORY_LINES, ids=lambda v: str(v)[:40])
def test_memory_profile_gives_the_kv_share_its_text_says(rel: str, want: dict[str, float]) -> None:
    tables, _ = ingest(real(rel))
    first = rows(tables, "log_memory", "memory_profile").row(0, named=True)
    for field, value in want.items():
        assert first[field] == pytest.approx(value), field


def test_tp8_log_has_one_pool_row_per_rank_and_a_group_minimum() -> None:
    tables, _ = ingest(real("issues/vllm-v1-0.10.2-tp8-kv-init-9.log"))
    per_rank = rows(tables, "log_kv_pool", "available_kv_memory").sort("rank")
    assert per_rank["rank"].to_list() == list(range(8))
    assert per_rank["ep_rank"].to_list() == list(range(8))
    assert per_rank["process"].to_list() == [f"Worker_TP{r}_EP{r}" for r in range(8)]
    # Lines 9-16: TP6 10.64, TP2 10.64, TP7 10.65, TP0 10.68, TP4 10.68, TP5 10.64, ...
    assert per_rank["gib"].to_list() == [10.68, 10.64, 10.64, 10.65, 10.68, 10.64, 10.64, 10.65]
    sizes = rows(tables, "log_kv_pool", "kv_cache_size").sort("source_line")
    assert sizes["tokens"].to_list() == [
        238208,
        237392,
        237344,
        237520,
        238256,
        237344,
        237392,
        237520,
    ]
    concurrency = rows(tables, "log_kv_pool", "max_concurrency").sort("source_line")
    assert concurrency["concurrency"].to_list() == [7.27, 7.24, 7.24, 7.25, 7.27, 7.24, 7.24, 7.25]
    assert set(concurrency["max_model_len"]) == {32768}
    assert rows(tables, "log_memory", "free_memory")["rank"].sort().to_list() == list(range(8))
    store = Store()
    try:
        for name, frame in tables.items():
            store.append(name, frame)
        q = store.reader
        assert (
            q.scalar("SELECT min(tokens) FROM log_kv_pool WHERE event = 'kv_cache_size'") == 237344
        )
        smallest = q.sql(
            "SELECT rank, gib FROM log_kv_pool WHERE event = 'available_kv_memory' "
            "ORDER BY gib, rank LIMIT 1"
        ).row(0)
        assert smallest == (1, pytest.approx(10.64))
        assert q.scalar("SELECT min(concurrency) FROM log_kv_pool") == pytest.approx(7.24)
    finally:
        store.discard()


def test_interleaved_prefixes_give_the_bare_line_to_the_outer_writer() -> None:
    path = real("issues/vllm-v1-0.10.2-tp8-kv-init-9.log")
    lines = path.read_bytes().decode().split("\n")[:4]
    frame = parse_batch(lines_frame(lines), load_pack("vllm_log")).frame
    # Line 3: `(Worker_TP3_EP3 pid=2081) (Worker_TP6_EP6 pid=2084) INFO ...`; line 4 has no prefix.
    assert frame.row(2, named=True)["proc"] == "Worker_TP6_EP6"
    fourth = frame.row(3, named=True)
    assert (fourth["proc"], fourth["pid"]) == ("Worker_TP3_EP3", "2081")
    assert fourth["repair"] == "attributed interleaved prefix"
    _, (acct,) = ingest(path)
    assert "interleaved prefixes attributed: 1 (lines 4)" in acct.notes


def test_wrapped_lines_are_rejoined_and_traceable() -> None:
    tables, (acct,) = ingest(real("issues/vllm-v0-stats-wrapped-4.log"))
    stats = rows(tables, "log_stats").sort("source_line")
    assert stats["source_line"].to_list() == [1, 3, 5, 7, 9]
    assert stats["source_line_end"].to_list() == [2, 4, 6, 8, 10]
    assert stats["kv_usage_pct"].to_list() == [17.6, 20.2, 24.8, 27.3, 29.6]
    assert stats["running"].to_list() == [32] * 5
    assert all("rejoined wrapped line" in r for r in stats["repair"].to_list())
    # Line 5 holds a truncated record glued to the one that wraps onto line 6.
    assert stats.filter(pl.col("source_line") == 5)["repair"][0] == (
        "split glued line; rejoined wrapped line"
    )
    assert "rejoined wrapped lines: 5 (lines 1-2, 3-4, 5-6, 7-8, 9-10)" in acct.notes
    assert "split glued records: 1 (lines 5)" in acct.notes
    # The truncated piece is not invented into a record: its line counts as unmatched.
    assert acct.lines_unmatched == 1
    assert acct.templates[0].first_line == 5


def test_glued_records_are_split_on_their_line() -> None:
    tables, (acct,) = ingest(real("issues/vllm-v1-stats-glued-lines-6.log"))
    stats = rows(tables, "log_stats").sort("ts")
    assert stats["source_line"].to_list() == [1, 2, 2]
    assert stats["kv_usage_pct"].to_list() == [91.2, 91.6, 91.9]
    assert stats["ts_raw"].to_list() == ["07-28 06:40:59", "07-28 06:41:09", "07-28 06:41:19"]
    assert stats["repair"].to_list() == [None, "split glued line", "split glued line"]
    assert "split glued records: 1 (lines 2)" in acct.notes
    assert acct.lines_parsed == acct.lines_total == 2


VLLM_CPU_RUNS = ["a-healthy", "b-saturation", "c-prefill-peak-noprefix", "c2-prefill-peak-prefix"]
_PLAIN_STATS = re.compile(
    r"Running: (\d+) reqs, Waiting: (\d+) reqs, \w+ KV cache usage: ([\d.]+)%"
)


@pytest.mark.parametrize("run", VLLM_CPU_RUNS)
def test_stats_values_match_a_plain_reading_of_the_file(run: str) -> None:
    path = real(f"vllm-cpu/{run}/server.log")
    plain = [
        (n, int(m[1]), int(m[2]), float(m[3]))
        for n, line in enumerate(path.read_bytes().decode().split("\n"), 1)  # as grep -n
        if (m := _PLAIN_STATS.search(line))
    ]
    tables, _ = ingest(path)
    stats = rows(tables, "log_stats", "stats_v1").sort("source_line")
    parsed = list(stats.select("source_line", "running", "waiting", "kv_usage_pct").iter_rows())
    assert plain, "the file has stats lines"
    assert parsed == plain


@pytest.mark.parametrize("run", [*VLLM_CPU_RUNS, "e-startup-refusal"])
def test_real_vllm_cpu_logs_are_almost_fully_covered(run: str) -> None:
    _, (acct,) = ingest(real(f"vllm-cpu/{run}/server.log"))
    assert acct.lines_parsed / acct.lines_total >= 0.99, acct.templates


def test_startup_refusal_yields_a_capacity_error() -> None:
    tables, _ = ingest(real("vllm-cpu/e-startup-refusal/server.log"))
    errors = rows(tables, "log_capacity_errors", "needs_more_kv")
    assert errors.height >= 1
    first = errors.sort("source_line").row(0, named=True)
    assert (first["max_model_len"], first["estimated_max_len"]) == (4096, 1920)
    assert first["process"] == "EngineCore"
    assert first["available_gib"] == 0.0
    assert "estimated maximum model length is 1920" in first["message"]


def test_config_rows_come_from_the_engine_line_and_non_default_args() -> None:
    tables, _ = ingest(real("vllm-cpu/c-prefill-peak-noprefix/server.log"))
    config = tables["config"]
    by_key: dict[str, set[str]] = defaultdict(set)
    for key, value in config.select("key", "value").iter_rows():
        by_key[key].add(value)
    assert by_key["max_model_len"] == {"4096"}
    assert by_key["kv_cache_memory_bytes"] == {"16777216"}
    assert by_key["enable_prefix_caching"] == {"False"}
    assert by_key["kv_cache_dtype"] == {"auto"}
    assert set(config["origin"]) == {"log"}


def test_oom_numbers_are_extracted_in_bytes() -> None:
    tables, _ = ingest(real("issues/vllm-oom-torch21-2.log"))
    (oom,) = rows(tables, "log_oom").iter_rows(named=True)
    assert oom["tried_bytes"] == round(3.50 * 2**30)
    assert oom["process_bytes"] == round(20.57 * 2**30)
    assert oom["gpu"] == 0


@pytest.mark.parametrize(
    "rel",
    [
        "issues/vllm-v0-memprofile-table-pr-4.log",
        "issues/vllm-v0-stats-wrapped-4.log",
        "issues/vllm-v1-0.10.2-tp8-kv-init-9.log",
        "issues/vllm-v1-0.10.2-tp8-startup-head-7.log",
        "vllm-cpu/e-startup-refusal/server.log",
    ],
)
def test_batch_boundaries_never_cut_a_record_apart(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Multi-line messages, wraps and stacked prefixes read the same in tiny batches."""
    path = real(rel)
    whole_tables, (whole,) = ingest(path)
    monkeypatch.setattr(line_reader, "BATCH_BYTES", 300)
    tiny_tables, (tiny,) = ingest(path)
    assert (tiny.lines_parsed, tiny.lines_unmatched, tiny.records) == (
        whole.lines_parsed,
        whole.lines_unmatched,
        whole.records,
    )
    assert tiny.notes == whole.notes
    for name, frame in whole_tables.items():
        key = ["source_line", "key" if name == "config" else "ts"]
        cols = sorted(frame.columns)
        assert tiny_tables[name].select(cols).sort(key).equals(frame.select(cols).sort(key)), name
