"""TensorRT-LLM iteration stats (trtllm-serve's JSON /metrics) saved to a file: the example
trtllm-serve's documentation prints, read under the server's own Prometheus names, the usage
fraction derived and said to be, polls appended, and other JSON left to its ingesters."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import classify_file
from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.metrics.trtllm_stats import TrtllmStatsIngester
from kvdiag.analyzer.text.lines import read_head

# docs/source/commands/trtllm-serve/trtllm-serve.rst's example output (its "..." left out).
DOC_EXAMPLE = """[
    {
        "gpuMemUsage": 76665782272,
        "iter": 154,
        "iterLatencyMS": 7.00688362121582,
        "kvCacheStats": {
            "allocNewBlocks": 3126,
            "allocTotalBlocks": 3126,
            "cacheHitRate": 0.00128,
            "freeNumBlocks": 101253,
            "maxNumBlocks": 101256,
            "missedBlocks": 3121,
            "reusedBlocks": 4,
            "tokensPerBlock": 32,
            "usedNumBlocks": 3
        },
        "numActiveRequests": 1
    }
]
"""


def ingest(path: Path) -> tuple[pl.DataFrame, pl.DataFrame, Account]:
    unit = InputUnit("trtllm_stats", path.name, (path,), (path.name,), path.stat().st_size, "r")
    found = list(TrtllmStatsIngester().ingest(unit, IngestContext(path.parent, None, None, None)))
    (batch,) = [e for e in found if isinstance(e, TableBatch)]
    (account,) = [e for e in found if isinstance(e, Account)]
    assert batch.series is not None
    samples = batch.frame.join(batch.series, on="_series_hint")
    return samples, batch.series, account


def test_the_documented_example_is_read_under_the_servers_prometheus_names(
    tmp_path: Path,
) -> None:
    path = tmp_path / "1764670272.json"
    path.write_text(DOC_EXAMPLE)
    assert classify_file(path.name, read_head(path))[0] is TrtllmStatsIngester
    samples, _, account = ingest(path)
    got = dict(zip(samples["metric"], samples["value"], strict=True))
    kv = json.loads(DOC_EXAMPLE)[0]["kvCacheStats"]
    assert got["kv_total_blocks"] == kv["maxNumBlocks"]
    assert got["kv_active_blocks"] == kv["usedNumBlocks"]
    assert got["kv_free_blocks"] == kv["freeNumBlocks"]
    assert got["kv_block_size"] == kv["tokensPerBlock"]
    assert got["prefix_cache_hit_rate"] == kv["cacheHitRate"]
    assert got["num_requests_running"] == 1 and got["engine_gpu_memory"] == 76665782272
    assert account.lines_parsed == account.lines_total == DOC_EXAMPLE.count("\n")
    assert set(samples["source_line"]) == {2}  # the line the iteration's object opens on
    assert str(samples["ts"][0]) == "2025-12-02 10:11:12"  # the file's name: a scrape time


def test_the_usage_fraction_is_derived_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    path.write_text(DOC_EXAMPLE)
    samples, _, account = ingest(path)
    usage = samples.filter(pl.col("metric") == "kv_cache_usage").row(0, named=True)
    assert usage["value"] == pytest.approx(3 / 101256)
    assert "derived" in usage["raw"] and usage["name"] == "trtllm_kv_cache_utilization"
    assert "derived" in " ".join(account.notes)
    assert "without a time" in " ".join(account.notes)  # no timestamp, no scrape-time name


def test_polls_appended_are_read_each_with_its_own_time(tmp_path: Path) -> None:
    polls = [
        [{"iter": i, "timestamp": f"12-02-2025 10:11:{10 + i:02d}.000123", "numQueuedRequests": i}]
        for i in range(3)
    ]
    path = tmp_path / "polls.json"
    path.write_text("\n".join(json.dumps(p) for p in polls) + "\n")
    samples, _, account = ingest(path)
    waiting = samples.filter(pl.col("metric") == "num_requests_waiting").sort("source_line")
    assert waiting["value"].to_list() == [0.0, 1.0, 2.0]
    assert waiting["source_line"].to_list() == [1, 2, 3]
    assert [str(t) for t in waiting["ts"]][-1] == "2025-12-02 10:11:12.000123"
    assert account.lines_unmatched == 0


def test_a_broken_dump_keeps_what_came_before_the_break(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text('[{"iter": 1, "numActiveRequests": 4},\n{"iter": 2, "numAct')
    samples, _, account = ingest(path)
    assert samples["value"].to_list() == [4.0]
    assert account.lines_unmatched == 1 and account.lines_parsed == 1


def test_other_json_is_not_taken_for_iteration_stats() -> None:
    api = '{"status": "success", "data": {"resultType": "vector", "result": []}}'
    requests = '{"request_id": "a", "prompt_tokens": 12, "completion_tokens": 3}'
    for head in (api, requests, "[1, 2, 3]"):
        assert TrtllmStatsIngester.sniff("x.json", head) == 0
