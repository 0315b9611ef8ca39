"""vLLM's KV-connector lines (issue 32): the connector named, P/D transfers gone wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.metric_support import ingest, write

_P = "(Worker_TP0 pid=2078) WARNING 11-20 09:31:4{} [nixl_connector.py:2327] "
_EXPIRED = (
    "Releasing expired KV blocks for request cmpl-{} which were retrieved by 0 decode "
    "worker(s) within 480 seconds."
)
_PREFILL_LOG = "\n".join(
    [
        "(APIServer pid=1) INFO 11-20 09:10:00 [api_server.py:1896] vLLM API server version 0.19.1",
        "(EngineCore_DP0 pid=412) INFO 11-20 09:14:02 [base_scheduler.py:109] "
        "Initializing NIXL Scheduler 6c1e0a3b",
        *[_P.format(i) + _EXPIRED.format(rid) for i, rid in enumerate(["a", "b", "a"])],
        "(APIServer pid=1) INFO 11-20 09:31:50 [loggers.py:123] Engine 000: Avg prompt "
        "throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 41.0%, Prefix cache hit rate: 0.0%",
        "(EngineCore_DP0 pid=412) WARNING 11-20 09:31:51 [scheduler.py:227] "
        "Request cmpl-c: cannot store 112 blocks",
    ]
)


def _facts(incident: Path) -> dict[str, Any]:
    diagnosis = analyze(AnalyzeOptions(incident=incident)).diagnosis
    return {k: v for k, v in diagnosis.facts.items() if hasattr(v, "value")}


def test_connector_lines_are_parsed_into_the_connector_table(tmp_path: Path) -> None:
    write(tmp_path, "server.log", _PREFILL_LOG + "\n")
    got = ingest(tmp_path)
    assert got.account_of("vllm_log").lines_unmatched == 0
    rows = got.table("log_kv_connector")
    assert rows["event"].to_list() == ["init", *["blocks_expired"] * 3, "store_failed"]
    assert rows["connector"].to_list() == ["nixl"] * 4 + ["offloading"]


def test_connector_facts_name_it_and_count_requests_not_lines(tmp_path: Path) -> None:
    write(tmp_path, "server.log", _PREFILL_LOG + "\n")
    facts = _facts(tmp_path)
    assert facts["kv_connector"].value == "NIXL"
    assert facts["kv_connector"].source.line == 2
    expired = facts["kv_blocks_expired"]
    assert expired.value == 2  # cmpl-a printed twice (two lines), one request
    assert "timeout 480 s" in (expired.note or "")
    assert facts["offload_store_refusals"].value == 1
    assert "112 blocks" in (facts["offload_store_refusals"].note or "")


def test_no_connector_lines_make_no_connector_facts(tmp_path: Path) -> None:
    write(tmp_path, "server.log", _PREFILL_LOG.splitlines()[0] + "\n")
    facts = _facts(tmp_path)
    assert not {"kv_connector", "kv_blocks_expired", "offload_store_refusals"} & set(facts)


def _residency(count: float, lifetime: float, idle: float, gap: float) -> str:
    m = 'engine="0",model_name="m"'
    return "".join(
        f"# TYPE vllm:{name}_seconds histogram\n"
        f"vllm:{name}_seconds_sum{{{m}}} {total}\nvllm:{name}_seconds_count{{{m}}} {count}\n"
        for name, total in (
            ("kv_block_lifetime", lifetime),
            ("kv_block_idle_before_evict", idle),
            ("kv_block_reuse_gap", gap),
        )
    )


def test_block_residency_means_come_from_the_window_increase(tmp_path: Path) -> None:
    # --kv-cache-metrics (0.12+): the first scrape's totals are before the window
    write(tmp_path, "metrics/1773136800.000.prom", _residency(100, 500.0, 50.0, 900.0))
    write(tmp_path, "metrics/1773136810.000.prom", _residency(140, 700.0, 90.0, 1500.0))
    facts = _facts(tmp_path)
    assert facts["kv_block_lifetime_mean_s"].value == 5.0
    assert facts["kv_block_idle_before_evict_mean_s"].value == 1.0
    assert facts["kv_block_reuse_gap_mean_s"].value == 15.0
    assert "40 sampled blocks" in (facts["kv_block_reuse_gap_mean_s"].note or "")


def test_recomputed_prompt_tokens_are_a_fact_only_when_some_were(tmp_path: Path) -> None:
    def scrape(n: float) -> str:
        return (
            "# TYPE vllm:prompt_tokens_recomputed_total counter\n"
            f'vllm:prompt_tokens_recomputed_total{{engine="0",model_name="m"}} {n}\n'
        )

    write(tmp_path, "metrics/1773136800.000.prom", scrape(100))
    write(tmp_path, "metrics/1773136810.000.prom", scrape(100))
    assert "prompt_tokens_recomputed" not in _facts(tmp_path)
    write(tmp_path, "metrics/1773136820.000.prom", scrape(4196))
    assert _facts(tmp_path)["prompt_tokens_recomputed"].value == 4096
