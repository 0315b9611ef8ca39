"""Numbers that lie: each corpus entry that attacks with a number or a time is reported as
the input problem it is, at its file and line, and no verdict is built on it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from tests.conftest import analyze_json, run_cli
from tests.test_hostile import corpus_incident

# entry -> (path, line, message pattern) of the problems it must raise
EXPECTED: dict[str, list[tuple[str, int | None, str]]] = {
    "prom-nan-usage.prom": [
        ("prom-nan-usage.prom", 72, r"^kv_cache_usage = NaN is implausible \(not a number\)")
    ],
    "prom-negative-usage.prom": [
        ("prom-negative-usage.prom", 72, r"^kv_cache_usage = -0\.5 is implausible \(below 0\)")
    ],
    "prom-usage-above-one.prom": [
        ("prom-usage-above-one.prom", 72, r"^kv_cache_usage = 1\.7 is implausible \(above 1\)")
    ],
    "prom-inf-and-overflow.prom": [
        ("prom-inf-and-overflow.prom", 2, r"^num_requests_waiting = inf .*\(infinite\)"),
        ("prom-inf-and-overflow.prom", 3, r"^num_requests_running = inf .*\(infinite\)"),
        ("prom-inf-and-overflow.prom", 4, r"^kv_cache_usage = -inf .*\(infinite\)"),
    ],
    "kv-usage-over-100-percent.log": [
        ("kv-usage-over-100-percent.log", 1, r"^log_stats\.kv_usage_pct = 250 .*\(above 100\)")
    ],
    "huge-numbers.log": [
        ("huge-numbers.log", 1, r"^log_stats\.running = a number too long for 64 bits")
    ],
    "log-oom-tried-to-allocate-exabytes.log": [
        (
            "log-oom-tried-to-allocate-exabytes.log",
            2,
            r"^log_oom\.tried_bytes = a number too long for 64 bits is implausible",
        ),
    ],
    "nvidia-smi-csv-negative-and-huge.csv": [
        ("nvidia-smi-csv-negative-and-huge.csv", 2, r"memory_total_mib = -5 .*\(below 0\)"),
        ("nvidia-smi-csv-negative-and-huge.csv", 2, r"memory_used_mib = 1e\+20 .*\(above"),
    ],
    "clock-jumps-backwards.log": [
        ("clock-jumps-backwards.log", 2, r"^the clock goes back 10 s .*at line 1"),
    ],
    "scrapes-counter-reset": [
        ("metrics/1795959302.000.prom", 111, r"^counters drop \(num_preemptions 16 -> 2, and 3"),
    ],
    "scrapes-duplicate-timestamps": [
        ("metrics/scrape-1795959300.prom", 1, r"^2 scrapes of replica default at .* disagree"),
    ],
    "scrapes-out-of-order-names": [
        ("metrics/c-1795959386.000.prom", 1, r"^scrapes out of order: .*b-1795959400"),
    ],
    "scrapes-markers-out-of-order.prom": [
        ("scrapes-markers-out-of-order.prom", 616, r"^scrapes out of order"),
    ],
    "two-vllm-versions-one-folder": [
        ("old.log", 1, r"2 engine versions \(0\.32\.0 \(new\.log:1\), 0\.6\.4\.post1 \(old"),
    ],
    "log-and-scrapes-from-different-days": [
        ("server.log", None, r"^server\.log .* does not overlap in time with metrics/ .* 15 days"),
    ],
}
# Entries whose problem makes the verdict doubtful: its confidence drops and it says why.
DOUBTED = {
    "clock-jumps-backwards.log",
    "scrapes-duplicate-timestamps",
    "two-vllm-versions-one-folder",
    "log-and-scrapes-from-different-days",
}
# Entries whose values are set aside (the rest are time problems, kept and reported).
SET_ASIDE = {k for k, v in EXPECTED.items() if any("implausible" in p for *_, p in v)}


def _analyze(tmp_path: Path, name: str) -> tuple[dict, Path]:
    incident = corpus_incident(tmp_path, name)
    db = tmp_path / "store.duckdb"
    result = run_cli("analyze", str(incident), "--format", "json", "-q", "--db", str(db))
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout), db


def test_every_expected_entry_is_in_the_corpus() -> None:
    corpus = Path(__file__).parent / "hostile"
    assert all((corpus / name).exists() for name in EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_lying_number_is_reported_where_it_is(tmp_path: Path, name: str) -> None:
    doc, _ = _analyze(tmp_path, name)
    problems = doc["input_problems"]
    for path, line, pattern in EXPECTED[name]:
        hits = [p for p in problems if re.search(pattern, p["message"])]
        assert hits, (pattern, problems)
        assert (hits[0]["path"], hits[0]["line"]) == (path, line), hits[0]


@pytest.mark.parametrize("name", sorted(SET_ASIDE))
def test_set_aside_values_reach_no_finding(tmp_path: Path, name: str) -> None:
    doc, db = _analyze(tmp_path, name)
    with duckdb.connect(str(db), read_only=True) as con:
        aside = set(con.sql("SELECT source_path, source_line FROM implausible_values").fetchall())
    expected = {(path, line) for path, line, pattern in EXPECTED[name] if "implaus" in pattern}
    assert aside == expected
    cited = {(e["path"], e["line"]) for f in doc["findings"] for e in f["evidence"]}
    assert not cited & aside, "a finding cites a value that was set aside"
    summary = doc["verdict"]["summary"].lower()
    assert not re.search(r"\b(nan|inf)\b|250%", summary), summary


@pytest.mark.parametrize("name", sorted(DOUBTED))
def test_doubtful_inputs_lower_the_confidence_and_say_why(tmp_path: Path, name: str) -> None:
    doc, _ = _analyze(tmp_path, name)
    verdict = doc["verdict"]
    assert verdict["primary"] != "insufficient_evidence", "the case should reach a verdict"
    assert verdict["confidence"] != "high"
    assert re.search(r"Confidence (medium|low): .* \(see input problems\)$", verdict["summary"])


def test_sound_inputs_raise_no_doubt(tmp_path: Path) -> None:
    """The real recorded runs: no value set aside, no time problem, no doubt said."""
    incident = Path(__file__).parents[1] / "fixtures" / "vllm-b-saturation" / "incident"
    result = run_cli("analyze", str(incident), "--format", "json", "-q")
    doc = json.loads(result.stdout)
    assert doc["input_problems"] == []
    assert "see input problems" not in doc["verdict"]["summary"]


def test_a_replica_restarting_all_day_lists_a_few_restarts_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    # 8 restarts: the counter drops from 5 to 0 every other scrape.
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    for i in range(16):
        value = 5 if i % 2 else 0
        (metrics / f"{1795959300 + i}.prom").write_text(
            "# TYPE vllm:num_preemptions counter\n"
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {value}\n'
        )
    _, doc = analyze_json(tmp_path)
    drops = [p for p in doc["input_problems"] if p["message"].startswith("counters drop")]
    assert [p["path"] for p in drops] == [f"metrics/{1795959302 + 2 * i}.prom" for i in range(5)]
    assert drops[-1]["message"].endswith("; 2 more restarts of this replica")
    assert not any("more restart" in p["message"] for p in drops[:-1])
