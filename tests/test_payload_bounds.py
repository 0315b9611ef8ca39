"""Layer 2's live-token estimate carries its bounds (issue 28, part 5).

A class may be claimed only when the bound, not the mean, crosses the line: padding is
never the primary class where the longest the running requests could be covers the
allocated slots. The property test builds the issue's mix (a few long requests among
many short ones, the long ones running and filling the pool) with pools and block sizes
varied, runs KV201 on it, and checks that against an oracle computed here.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.model.quantities.spread import exact, from_buckets, payload_range, unknown
from kvdiag.domain.records.diagnosis import Severity
from tests.conftest import FIXTURES, analyze_json
from tests.rules.casefile import RuleCase, run_case

START = datetime(2026, 11, 29, 13, 0, 0)


def test_sum_of_the_running_smallest_and_largest() -> None:
    s = exact([150] * 300 + [3000] * 3, [160] * 300 + [3100] * 3, "log")
    assert s.low(3) == 450 and s.high(3) == 9300
    assert s.high(5) == 9300 + 320  # the two next longest are short ones
    assert s.low(400) == 300 * 150 + 3 * 3000 + 97 * 150  # past the log: the shortest repeats
    assert s.high(400) == 3 * 3100 + 300 * 160 + 97 * 3100


def test_histogram_buckets_give_edges() -> None:
    # 3 requests at most 100 tokens, 2 in (100, 1000], 1 over 1000 (capped at 4,096).
    s = from_buckets([(100.0, 3), (1000.0, 5), (math.inf, 6)], 4096, "h")
    assert s is not None
    assert s.high(2) == 4096 + 1000 and s.low(4) == 0 * 3 + 100
    gen = from_buckets([(10.0, 6), (math.inf, 6)], None, "h")
    assert gen is not None and s.with_generated(gen).high(1) == 4096 + 10


def test_pool_bounds_narrow_what_lengths_leave_open() -> None:
    # Worked example (domain.md §6): 1-token requests in 16-token blocks leave 15 empty.
    one_token = payload_range(16 * 10, 10, unknown(4096, "none"), 16, shared_prefixes=False)
    assert one_token.low == 10 / 160 and one_token.high == 1.0
    # Without shared prefixes live tokens cannot outnumber their slots.
    long = payload_range(4224, 2, exact([2100, 2130], [2116, 2146], "log"), 128, False)
    assert long.high == 1.0 and long.low <= long.high


def _case(short: int, n_short: int, long: int, n_long: int, block: int, spare: int) -> RuleCase:
    """The long requests run and hold their blocks; `spare` blocks stay free."""
    held = n_long * math.ceil(long / block) * block
    pool = held + spare * block + block  # + vLLM's null block
    usage = held / (pool - block)
    prompts = [short] * n_short + [long] * n_long
    spec: dict[str, Any] = {
        "series": [
            _series("kv_cache_usage", "vllm:kv_cache_usage_perc", [usage] * 4),
            _series("num_requests_running", "vllm:num_requests_running", [n_long] * 4),
        ],
        "tables": {
            "config": [
                _config("kv_cache_size_tokens", pool),
                _config("block_size", block),
                _config("enable_prefix_caching", "False"),  # no shared blocks: payload <= 1
            ],
            "client_requests": [
                {
                    "source_path": "requests.jsonl",
                    "source_line": i + 1,
                    "replica": "default",
                    "request_id": f"r{i}",
                    "prompt_tokens": p,
                    "completion_tokens": 1,
                    "max_tokens": 1,
                    "status": "ok",
                }
                for i, p in enumerate(prompts)
            ],
        },
    }
    return RuleCase("KV201", "generated", spec)


def _series(metric: str, name: str, values: list[float]) -> dict[str, Any]:
    return {"metric": metric, "name": name, "start": START, "line": 1, "values": values}


def _config(key: str, value: int | str) -> dict[str, Any]:
    return {
        "source_path": "metrics/0.prom",
        "source_line": 1,
        "replica": "default",
        "origin": "metrics",
        "key": key,
        "value": str(value),
    }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    short=st.integers(20, 300),
    n_short=st.integers(20, 400),
    long=st.integers(1000, 4000),
    n_long=st.integers(1, 6),
    block=st.sampled_from([16, 32, 128, 256]),
    spare=st.integers(0, 3),
)
def test_padding_is_never_claimed_when_the_longest_cover_the_slots(
    short: int, n_short: int, long: int, n_long: int, block: int, spare: int
) -> None:
    outcome = run_case(_case(short, n_short, long, n_long, block, spare))
    findings = outcome.findings
    allocated = n_long * math.ceil(long / block) * block
    longest_running = n_long * (long + 1)  # oracle: the n_long longest requests of the log
    assert longest_running / allocated >= 0.5  # the scenario: the longest cover the slots
    assert not [f for f in findings if f.severity is not Severity.INFO]
    payload = [c for _, c in outcome.comparisons if "payload" in c.quantity]
    assert payload and isinstance(payload[0].high, float) and payload[0].high <= 1.0


def test_the_issue_mix_was_claimed_by_the_mean() -> None:
    """3 running 3,000-token requests among 300 of 150 tokens: the mean (about 178 tokens)
    put the payload at 6 %; the bounds see the pool full of the long ones."""
    outcome = run_case(_case(150, 300, 3000, 3, 16, 0))
    assert not outcome.findings
    ruled = [r.reason for r in outcome.ruled_out]
    assert any("at least 99%" in reason for reason in ruled), ruled


def _payload_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        c
        for layer in doc["reconciliation"]
        for c in layer["comparisons"]
        if c["quantity"].startswith("payload")
    ]


def test_padding_fixture_stays_padding() -> None:
    _, doc = analyze_json(FIXTURES / "vllm-h-padding-waste" / "incident")
    assert doc["verdict"]["primary"] == "padding_waste"
    (row,) = _payload_rows(doc)
    assert row["high"] < 0.5 and row["low"] <= row["high"]


def test_saturation_fixture_is_not_padding() -> None:
    _, doc = analyze_json(FIXTURES / "vllm-b-saturation" / "incident")
    assert doc["verdict"]["primary"] != "padding_waste"
    assert "padding_waste" not in doc["verdict"]["classes"]
    (row,) = _payload_rows(doc)
    assert row["low"] >= 0.5


def test_no_payload_above_the_slots_without_shared_prefixes() -> None:
    """pod-c (prefix caching off) read 101 %: the mean counted a 2,115-token prompt whole
    while chunked prefill (2,048-token steps) had written only part of it."""
    _, doc = analyze_json(FIXTURES / "vllm-replica-drift-c-c2" / "incident")
    rows = [r for r in _payload_rows(doc) if "pod-c]" in r["quantity"]]
    assert rows and all(r["observed"] <= 1.0 and r["high"] <= 1.0 for r in rows)
    reasons = [r["reason"] for r in doc["verdict"]["ruled_out"]]
    assert not any("101%" in r for r in reasons)


def test_threshold_expectations_are_labelled() -> None:
    _, doc = analyze_json(FIXTURES / "vllm-replica-drift-c-c2" / "incident")
    rows = {c["quantity"]: c for layer in doc["reconciliation"] for c in layer["comparisons"]}
    assert rows["prompt tokens per generated token [pod-c]"]["expected_kind"] == "threshold"
    assert rows["peak KV usage [pod-c]"]["expected_kind"] == "threshold"
    assert rows["max waiting requests [pod-c]"]["expected_kind"] == "healthy"
