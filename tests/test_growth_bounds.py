"""Layer 3's growth estimates carry their bounds (issue 28, part 5).

KV304 may call a level healthy only when the most the running requests may grow to fits
the pool, not their mean; the remedies are priced at the longest request. The oracles
here are computed from the fixtures' own request logs, independently of the rules.
"""

from __future__ import annotations

import json
import math
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.model.quantities.demand import DemandRange, slots
from kvdiag.analyzer.model.quantities.spread import exact, from_buckets, unknown
from tests.conftest import FIXTURES, analyze_json
from tests.rules.casefile import RuleCase, run_case

START = datetime(2026, 11, 29, 13, 0, 0)
LONG_AMONG_SHORT = FIXTURES / "vllm-k-long-among-short" / "incident"


def test_growth_adds_both_ends_rank_by_rank() -> None:
    prompts = from_buckets([(100.0, 3), (1000.0, 5)], None, "h")
    cap = from_buckets([(50.0, 4), (500.0, 5)], None, "h")
    assert prompts is not None and cap is not None
    grown = prompts.grown_by(cap)
    # The 2 longest: prompts at most 1,000 each plus the largest cap (500) and the next
    # (at most 50); the 2 shortest: prompts over 0 plus caps over 0.
    assert grown.high(2) == 1000 + 500 + 1000 + 50
    assert grown.low(2) == 0.0
    assert grown.low(5) == 0 * 3 + 100 * 2 + 0 * 4 + 50  # the 5 smallest of each, added


def test_max_model_len_caps_and_blocks_round_up() -> None:
    s = unknown(math.inf, "none").capped(4096)
    assert s.high(3) == 3 * 4096
    held = exact([100, 129, 3000], [100, 129, 3000], "log").in_slots(128)
    assert held.high(1) == 3072 and held.low(2) == 128 + 256


def test_a_claim_stands_on_the_bound_that_makes_it_safe() -> None:
    assert DemandRange(3, 900, 9000, 9000).fits
    assert DemandRange(3, 9001, 9300, 9000).exceeds
    between = DemandRange(3, 900, 9300, 9000)
    assert between.straddles and not between.fits and not between.exceeds


def _requests(incident: Path) -> list[dict[str, Any]]:
    lines = (incident / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_long_among_short_is_saturation_and_priced_at_the_longest() -> None:
    _, doc = analyze_json(LONG_AMONG_SHORT)
    assert doc["verdict"]["primary"] == "saturation"
    assert "padding_waste" not in doc["verdict"]["classes"]
    # Oracle: the longest request's prompt + max_tokens in 128-token blocks, against the
    # 95 usable blocks (vLLM keeps one of the 96 out of use).
    longest = max(r["prompt_tokens"] + r["max_tokens"] for r in _requests(LONG_AMONG_SHORT))
    fit = (95 * 128) // slots(longest, 128)
    assert fit == 3
    (kv301,) = [f for f in doc["findings"] if f["code"] == "KV301"]
    seqs = kv301["remediation"][0]
    assert seqs["action"] == f"--max-num-seqs {fit}"  # the mean (298 tokens) priced 31
    assert f"{longest:,} tokens" in seqs["rationale"] and "31 would fit" in seqs["rationale"]


def test_the_peak_is_the_requests_in_flight_then() -> None:
    """The explicit pool size is priced at the requests in flight at the worst moment: the
    client log's exact set, not the peak count times the mean (18 x 298)."""
    _, doc = analyze_json(LONG_AMONG_SHORT)
    (kv301,) = [f for f in doc["findings"] if f["code"] == "KV301"]
    (sized,) = [r for r in kv301["remediation"] if r["action"].startswith("--kv-cache-memory")]
    assert "18 requests at 04:50:33" in sized["rationale"]
    moment = datetime(2026, 12, 2, 4, 50, 33, 41000, tzinfo=UTC).timestamp()
    in_flight = [
        r for r in _requests(LONG_AMONG_SHORT) if r["send_ts"] - 1 <= moment <= r["end_ts"] + 1
    ]
    # The 18 requests running or waiting are among those in flight (a second's slack each
    # side): at most the 18 that hold the most.
    held = sorted(slots(r["prompt_tokens"] + r["max_tokens"], 128) for r in in_flight)[-18:]
    need_mib = (sum(held) + 128) * 2048 / 2**20
    assert f"need {need_mib:,.1f} MiB" in sized["rationale"]
    assert sum(held) > 1.8 * 95 * 128  # the mean made it 6,912 tokens, under the pool


def test_healthy_fixture_stays_healthy_with_its_range() -> None:
    _, doc = analyze_json(FIXTURES / "vllm-a-healthy" / "incident")
    assert doc["verdict"]["primary"] == "healthy"
    rows = [c for layer in doc["reconciliation"] for c in layer["comparisons"]]
    (growth,) = [c for c in rows if c["quantity"].startswith("growth of the running")]
    assert growth["low"] <= growth["high"] <= growth["expected"]
    assert growth["expected_kind"] == "threshold"
    # Oracle: 4 running requests hold at most the 4 longest of the log, in 128-token blocks.
    grown = sorted(
        r["prompt_tokens"] + r["max_tokens"]
        for r in _requests(FIXTURES / "vllm-a-healthy" / "incident")
    )
    assert growth["high"] <= sum(slots(n, 128) for n in grown[-4:])


def test_saturation_fixture_stays_saturation() -> None:
    _, doc = analyze_json(FIXTURES / "vllm-b-saturation" / "incident")
    assert doc["verdict"]["primary"] == "saturation"


def test_a_client_clock_off_by_a_minute_falls_back_to_the_window(tmp_path: Path) -> None:
    """Shifted by 60 s, the log's requests are not in flight when the server ran them: the
    in-flight sets are not used, and the bound comes from the whole window."""
    incident = tmp_path / "incident"
    shutil.copytree(FIXTURES / "vllm-a-healthy" / "incident", incident)
    rows = _requests(incident)
    for r in rows:
        for key in ("send_ts", "first_token_ts", "end_ts"):
            if r.get(key) is not None:
                r[key] += 60
    (incident / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, shifted = analyze_json(incident)
    _, aligned = analyze_json(FIXTURES / "vllm-a-healthy" / "incident")
    assert "in flight at each observation" in aligned["verdict"]["summary"]
    assert "in flight at each observation" not in shifted["verdict"]["summary"]
    assert shifted["verdict"]["primary"] == "healthy"


def _case(lengths: list[int], running: int, pool_blocks: int, block: int) -> RuleCase:
    """`running` requests at a low level with nothing waiting; the client log holds
    `lengths` (prompt + max_tokens) without times, so any of them may be running."""
    pool = pool_blocks * block + block  # + vLLM's null block
    spec: dict[str, Any] = {
        "series": [
            _series("kv_cache_usage", "vllm:kv_cache_usage_perc", [0.3] * 3),
            _series("num_requests_running", "vllm:num_requests_running", [running] * 3),
            _series("num_requests_waiting", "vllm:num_requests_waiting", [0] * 3),
        ],
        "tables": {
            "config": [_config("kv_cache_size_tokens", pool), _config("block_size", block)],
            "client_requests": [
                {
                    "source_path": "requests.jsonl",
                    "source_line": i + 1,
                    "replica": "default",
                    "request_id": f"r{i}",
                    "prompt_tokens": n - n // 4,
                    "max_tokens": n // 4,
                    "status": "ok",
                }
                for i, n in enumerate(lengths)
            ],
        },
    }
    return RuleCase("KV304", "generated", spec)


def _series(metric: str, name: str, values: list[float]) -> dict[str, Any]:
    return {"metric": metric, "name": name, "start": START, "line": 1, "values": values}


def _config(key: str, value: int) -> dict[str, Any]:
    return {
        "source_path": "metrics/0.prom",
        "source_line": 1,
        "replica": "default",
        "origin": "metrics",
        "key": key,
        "value": str(value),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    short=st.lists(st.integers(20, 400), min_size=5, max_size=200),
    long=st.lists(st.integers(1000, 4000), min_size=0, max_size=6),
    running=st.integers(1, 8),
    pool_blocks=st.integers(4, 200),
    block=st.sampled_from([16, 128]),
)
def test_healthy_only_when_the_longest_running_fit(
    short: list[int], long: list[int], running: int, pool_blocks: int, block: int
) -> None:
    lengths = short + long
    outcome = run_case(_case(lengths, running, pool_blocks, block))
    healthy = [f for f in outcome.findings if f.code == "KV304"]
    # Oracle: the `running` longest requests, each in whole blocks, against the usable pool;
    # more running than the client log lists: the others may be as long as its longest.
    ordered = sorted(lengths)
    longest = [ordered[-1]] * max(0, running - len(ordered)) + ordered[-running:]
    worst = sum(slots(n, block) for n in longest)
    mean = sum(lengths) / len(lengths)
    if worst > pool_blocks * block:
        assert not healthy, (worst, pool_blocks * block, mean)
    else:
        assert healthy, outcome.ruled_out


def _demand_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [c for layer in doc["reconciliation"] for c in layer["comparisons"]]
    return [c for c in rows if c["quantity"].startswith("peak demand (running + waiting)")]


def _in_flight_slots(moment: float, block: int) -> list[float]:
    """Slots of each request the client log has in flight at `moment`, a second's slack
    each side, smallest first."""
    return sorted(
        slots(r["prompt_tokens"] + r["max_tokens"], block)
        for r in _requests(LONG_AMONG_SHORT)
        if r["send_ts"] - 1 <= moment <= r["end_ts"] + 1
    )


def test_kv301_peak_demand_is_the_requests_in_flight_not_the_mean() -> None:
    """The peak-demand row and title of KV301 on long-among-short: the 18 requests held at
    the worst moment (04:50:33) are at most the 18 largest and at least the 18 smallest of
    those in flight by the client log; the mean (298 tokens) made it 6,912 tokens, under
    the pool, and the title said nothing of demand."""
    _, doc = analyze_json(LONG_AMONG_SHORT)
    (row,) = _demand_rows(doc)
    pool_tokens = 95 * 128  # 96 blocks of 128, one kept out of use
    assert row["expected"] == pool_tokens and row["expected_kind"] == "threshold"
    assert row["quantity"] == "peak demand (running + waiting) x (prompt + max_tokens)"
    moment = datetime(2026, 12, 2, 4, 50, 33, 41000, tzinfo=UTC).timestamp()
    held = _in_flight_slots(moment, 128)
    assert row["observed"] == row["high"] == sum(held[-18:])
    # The low end is the highest of the lows over every observation: at least this one's.
    assert sum(held[:18]) <= row["low"] <= row["high"]
    assert row["low"] > pool_tokens
    assert row["note"].startswith("18 requests (prompt + max_tokens = 139 to 3,227 tokens each")
    (kv301,) = [f for f in doc["findings"] if f["code"] == "KV301"]
    ratio = row["low"] / pool_tokens
    assert f"hold {row['low']:,} tokens = {ratio:.1f}x the pool of 12,160" in kv301["title"]


def _bucket_increase(folder: Path, metric: str) -> dict[str, float]:
    """Per bucket bound, its increase from the first scrape to the last."""
    files = sorted(folder.glob("*.prom"))

    def counts(path: Path) -> dict[str, float]:
        prefix = f"vllm:{metric}_bucket{{"
        return {
            line.split('le="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in path.read_text().splitlines()
            if line.startswith(prefix)
        }

    first, last = counts(files[0]), counts(files[-1])
    return {le: last[le] - first.get(le, 0.0) for le in last}


def _peak_held(folder: Path) -> int:
    """The most requests running + waiting in one scrape."""
    most = 0
    for path in folder.glob("*.prom"):
        held = 0.0
        for line in path.read_text().splitlines():
            if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")):
                held += float(line.rsplit(" ", 1)[1])
        most = max(most, int(held))
    return most


def test_kv301_claims_no_peak_demand_when_the_bounds_straddle_the_pool() -> None:
    """gpu-replica-imbalance-sticky, pod-a: every prompt is in the (1,000, 2,000] bucket and
    every max_tokens in (500, 1,000], so the 269 requests held at the peak need 1,500 to
    3,000 tokens each: 404,576 to 809,152 slots (blocks of 16) against 449,984. The mean
    (2,012 tokens) read 1.2x the pool and the title claimed it; the bounds do not."""
    metrics = FIXTURES / "gpu-replica-imbalance-sticky" / "incident" / "pod-a" / "metrics"
    prompts = _bucket_increase(metrics, "request_prompt_tokens")
    caps = _bucket_increase(metrics, "request_params_max_tokens")
    assert prompts["1000.0"] == 0 and prompts["2000.0"] == prompts["+Inf"] > 0
    assert caps["500.0"] == 0 and caps["1000.0"] == caps["+Inf"] > 0
    held = _peak_held(metrics)
    _, doc = analyze_json(FIXTURES / "gpu-replica-imbalance-sticky" / "incident")
    (row,) = [r for r in _demand_rows(doc) if r["quantity"].endswith("[pod-a]")]
    assert row["low"] == held * slots(1000 + 500, 16)
    assert row["high"] == held * slots(2000 + 1000, 16)
    assert row["low"] < row["expected"] < row["high"]
    (kv301,) = [f for f in doc["findings"] if f["code"] == "KV301" and f["replica"] == "pod-a"]
    assert "KV pool full while requests waited" in kv301["title"]
    assert "peak demand" not in kv301["title"]
