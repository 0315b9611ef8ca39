"""The SGLang log ingester on every SGLang fragment of ../shared/realdata/issues: recognition,
full line accounting, and the numbers each line's text shows, read here independently of the
format pack (plain per-field regexes over the raw text)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import classify_file
from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.sglang import SglangLogIngester
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester
from kvdiag.analyzer.text.lines import read_head
from tests.conftest import FIXTURES, REALDATA, shared

Tables = dict[str, pl.DataFrame]


def ingest(path: Path, replica: str = "r") -> tuple[Tables, Account]:
    """One file through the SGLang ingester: tables (concatenated) and its account."""
    unit = InputUnit("sglang_log", path.name, (path,), (path.name,), path.stat().st_size, replica)
    frames: dict[str, list[pl.DataFrame]] = defaultdict(list)
    accounts = []
    for emit in SglangLogIngester().ingest(unit, IngestContext(path.parent, 2026, None, None)):
        if isinstance(emit, TableBatch):
            frames[emit.table].append(emit.frame)
        elif isinstance(emit, Account):
            accounts.append(emit)
    (account,) = accounts
    tables = {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in frames.items()}
    return tables, account


def fragment(name: str) -> Path:
    return shared("realdata", "issues", name)


def sglang_fragments() -> list[str]:
    if not REALDATA.exists():
        return ["<absent>"]
    return sorted(p.name for p in (REALDATA / "issues").glob("sglang-*.log"))


# What each fragment's lines state, as (table, column, regex over the line, scale): the regex
# reads the number from every line holding it, in line order; the table must hold exactly
# those values in that order. Usages are printed as ratios and stored as percentages.
_TP = r"^\[[^\]]* TP(\d+)\]"
_DECODE = [
    ("log_stats", "running", r"#running-req: (\d+)", 1),
    ("log_stats", "used_tokens", r"#token: (\d+)", 1),
    ("log_stats", "kv_usage_pct", r" token usage: ([\d.]+)", 100),
    ("log_stats", "gen_tps", r"gen throughput \(token/s\): ([\d.]+)", 1),
    ("log_stats", "waiting", r"#queue-req: (\d+)", 1),
]
_RETRACT = [
    ("log_preemptions", "count", r"#retracted_reqs: (\d+)", 1),
    ("log_preemptions", "ratio_before", r"#new_token_ratio: ([\d.]+) ->", 1),
    ("log_preemptions", "ratio_after", r"-> ([\d.]+)$", 1),
]
NUMBERS: dict[str, list[tuple[str, str, str, float]]] = {
    "sglang-decode-batch-0.2-1.log": [*_DECODE, ("log_stats", "rank", _TP, 1)],
    "sglang-decode-batch-comma-3.log": _DECODE,
    "sglang-decode-high-usage-queue-9.log": _DECODE,
    "sglang-usage-full-then-retract-11.log": [
        *_DECODE,
        *_RETRACT,
        ("log_preemptions", "rank", r"TP(\d+)\] Decode out of memory", 1),
    ],
    "sglang-decode-oom-retract-multi-tp-10.log": [*_RETRACT, ("log_preemptions", "rank", _TP, 1)],
    "sglang-retract-kv-full-14.log": _RETRACT,
    "sglang-prefill-0.4.6-5.log": [
        ("log_stats", "new_seqs", r"#new-seq: (\d+)", 1),
        ("log_stats", "new_tokens", r"#new-token: (\d+)", 1),
        ("log_stats", "cached_tokens", r"#cached-token: (\d+)", 1),
        ("log_stats", "kv_usage_pct", r"token usage: ([\d.]+)", 100),
        ("log_stats", "running", r"#running-req: (\d+)", 1),
        ("log_stats", "waiting", r"#queue-req: (\d+)", 1),
        ("log_http", "status", r'HTTP/1\.1" (\d{3})', 1),
    ],
    "sglang-prefill-decode-access-4.log": [
        ("log_stats", "running", r"#running-req: (\d+)", 1),
        ("log_stats", "kv_usage_pct", r"token usage: ([\d.]+)", 100),
        ("log_stats", "waiting", r"#queue-req: (\d+)", 1),
        ("log_stats", "prompt_tps", r"input throughput \(token/s\): ([\d.]+)", 1),
        ("log_stats", "new_tokens", r"#new-token: (\d+)", 1),
        ("log_http", "status", r'HTTP/1\.1" (\d{3})', 1),
    ],
    "sglang-hybrid-swa-after-retract-8.log": [
        ("log_stats", "running", r"#running-req: (\d+)", 1),
        ("log_stats", "used_tokens", r"#full token: (\d+)", 1),
        ("log_stats", "kv_usage_pct", r"full token usage: ([\d.]+)", 100),
        ("log_stats", "swa_usage_pct", r"swa token usage: ([\d.]+)", 100),
        ("log_stats", "gen_tps", r"gen throughput \(token/s\): ([\d.]+)", 1),
    ],
    "sglang-max-total-num-tokens-6.log": [
        ("log_kv_pool", "tokens", r"max_total_num_tokens=(\d+)", 1),
        ("log_kv_pool", "chunked_prefill_size", r"chunked_prefill_size=(\d+)", 1),
        ("log_kv_pool", "max_prefill_tokens", r"max_prefill_tokens=(\d+)", 1),
        ("log_kv_pool", "max_running_requests", r"max_running_requests=(\d+)", 1),
        ("log_kv_pool", "max_model_len", r"context_len=(\d+)", 1),
        ("log_kv_pool", "available_gib", r"available_gpu_mem=([\d.]+) GB", 1),
    ],
    "sglang-kv-allocated-vs-vllm-7.log": [
        ("log_kv_pool", "tokens", r"#tokens: (\d+)", 1),
        ("log_kv_pool", "k_gib", r"K size: ([\d.]+) GB", 1),
        ("log_kv_pool", "v_gib", r"V size: ([\d.]+) GB", 1),
    ],
    "sglang-decode-oom-runtimeerror-12.log": [
        ("log_capacity_errors", "requested_tokens", r"^Try to allocate (\d+) tokens", 1),
        ("log_capacity_errors", "available_tokens", r"^Avaliable tokens: (\d+)", 1),
        ("log_capacity_errors", "evictable_tokens", r"evictable_size\(\)=(\d+)", 1),
    ],
    "sglang-alloc-req-slots-oom-13.log": [
        ("log_capacity_errors", "available_slots", r"available_size\(\)=(\d+)", 1),
        ("log_capacity_errors", "requested_slots", r"num_reqs=(\d+)", 1),
    ],
}


def _from_text(path: Path, pattern: str, scale: float) -> list[float]:
    found = [re.search(pattern, line) for line in path.read_text().splitlines()]
    return [round(float(m.group(1)) * scale, 6) for m in found if m is not None]


def test_every_fragment_has_its_numbers_listed() -> None:
    shared("realdata", "issues")
    assert set(sglang_fragments()) == set(NUMBERS), "a fragment was added: list its numbers"


@pytest.mark.parametrize("name", sglang_fragments())
def test_fragment_is_recognised_and_fully_accounted(name: str) -> None:
    path = fragment(name)
    ingester, why = classify_file(name, read_head(path))
    assert ingester is SglangLogIngester, why
    _, account = ingest(path)
    assert account.lines_total == len(path.read_text().splitlines())
    assert account.balanced() and account.lines_unmatched == 0, account


@pytest.mark.parametrize("name", sglang_fragments())
def test_fragment_numbers_match_its_text(name: str) -> None:
    path = fragment(name)
    tables, _ = ingest(path)
    for table, column, pattern, scale in NUMBERS[name]:
        want = _from_text(path, pattern, scale)
        assert want, (name, column, "the regex found nothing: the check would be empty")
        if table == "log_http":  # access lines below 400 are counted per key instead
            got = sorted(_statuses(tables))
            want = sorted(want)
        else:
            got = tables[table].sort("source_line")[column].drop_nulls().to_list()
        assert [round(float(v), 6) for v in got] == want, (name, column)


def _statuses(tables: dict[str, pl.DataFrame]) -> list[int]:
    """Every access line's status: a row each in log_http (400 and above), and `count`
    lines per row of log_http_counts (below 400)."""
    rows = tables["log_http"]["status"].to_list() if "log_http" in tables else []
    if "log_http_counts" in tables:
        counted = tables["log_http_counts"]
        rows += [
            s for s, n in zip(counted["status"], counted["count"], strict=True) for _ in range(n)
        ]
    return rows


def test_pool_gib_is_k_plus_v_and_the_unit_is_binary() -> None:
    tables, _ = ingest(fragment("sglang-kv-allocated-vs-vllm-7.log"))
    row = tables["log_kv_pool"].row(0, named=True)
    assert row["gib"] == pytest.approx(16.46) and row["device"] == "GPU"


def test_a_multi_line_allocation_failure_is_one_row_spanning_its_lines() -> None:
    tables, account = ingest(fragment("sglang-decode-oom-runtimeerror-12.log"))
    rows = tables["log_capacity_errors"]
    assert rows.height == 1 and account.records == 1
    row = rows.row(0, named=True)
    assert (row["source_line"], row["source_line_end"]) == (1, 5)
    assert row["message"] == "Decode out of memory. Try to lower your batch size."
    assert row["raw"].splitlines()[-1] == "self.tree_cache.evictable_size()=0"


def test_the_ranks_of_the_header_are_the_process_and_its_tp_rank() -> None:
    tables, _ = ingest(fragment("sglang-decode-oom-retract-multi-tp-10.log"))
    rows = tables["log_preemptions"].sort("source_line")
    assert rows["process"][0] == "TP13" and rows["rank"][0] == 13
    assert set(rows["mode"]) == {"retract"} and set(rows["event"]) == {"sglang_retract"}


def test_dated_headers_give_the_time_as_printed_and_time_only_headers_no_date() -> None:
    dated, _ = ingest(fragment("sglang-usage-full-then-retract-11.log"))
    first = dated["log_stats"].sort("source_line").row(0, named=True)
    assert first["ts_raw"] == "2025-01-06 02:58:11"
    assert first["ts"].isoformat() == "2025-01-06T02:58:11"
    bare, _ = ingest(fragment("sglang-decode-batch-0.2-1.log"))
    assert set(bare["log_stats"]["ts"].to_list()) == {None}
    assert bare["log_stats"]["ts_raw"][0] == "04:40:55"


def test_another_loggers_line_is_a_record_not_a_retraction() -> None:
    tables, account = ingest(fragment("sglang-retract-kv-full-14.log"))
    assert tables["log_preemptions"].height == 1
    assert account.lines_parsed == 2


def test_config_rows_are_sglangs_own() -> None:
    tables, _ = ingest(fragment("sglang-max-total-num-tokens-6.log"))
    config = tables["config"]
    assert set(config["engine"]) == {"sglang"}
    got = dict(zip(config["key"], config["value"], strict=True))
    assert got["max_running_requests"] == "33" and got["context_length"] == "256000"


def _vllm_logs() -> list[Path]:
    found = sorted(REALDATA.glob("issues/vllm-*.log")) if REALDATA.exists() else []
    logs = sorted(FIXTURES.glob("*/incident/**/*.log"))
    return found + [p for p in logs if "sglang" not in p.name]  # SGLang fixtures name theirs


@pytest.mark.parametrize("path", _vllm_logs(), ids=lambda p: p.name)
def test_vllm_logs_are_not_taken_for_sglang(path: Path) -> None:
    ingester, _ = classify_file(path.name, read_head(path))
    assert ingester is not SglangLogIngester
    assert SglangLogIngester.sniff(path.name, read_head(path).decode(errors="replace")) < 90


def test_sglang_text_outscores_the_vllm_sniffer() -> None:
    for name in sglang_fragments():
        head = read_head(fragment(name)).decode()
        assert SglangLogIngester.sniff(name, head) > VllmLogIngester.sniff(name, head), name
