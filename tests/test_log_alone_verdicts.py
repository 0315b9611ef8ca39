"""Saturation from the log alone: real pasted fragments, each analysed by itself.

An engine prints a preemption, a retraction or SGLang's `Decode out of memory` only when its KV
pool is full, so a fragment holding just those lines is saturation; stats lines with a full pool
and a queue are too. Near misses (a queue beside a pool with room, a high pool with nothing
waiting, a retraction the paste does not hold) stay undecided. The numbers the titles quote and
the extents are checked against the fragment's text, read here with plain regular expressions.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from kvdiag.domain.records.diagnosis import (
    Confidence,
    Evidence,
    Extent,
    Finding,
    IncidentClass,
    MissingEvidence,
    Severity,
)
from kvdiag.rules.engine.classify import (
    BRIEF_SECONDS,
    SUSTAINED_SECONDS,
    confidence,
    extent_term,
)
from tests.conftest import analyze_json, shared
from tests.rules.evidence import assert_evidence_points_at_real_lines


def _analyse(name: str) -> tuple[Path, dict[str, Any]]:
    path = shared("realdata", "issues", name)
    _, doc = analyze_json(path)
    assert_evidence_points_at_real_lines(path.parent, doc)
    return path, doc


def _kv301(doc: dict[str, Any]) -> dict[str, Any]:
    (finding,) = [f for f in doc["findings"] if f["code"] == "KV301"]
    return finding


def _cited(finding: dict[str, Any]) -> set[str]:
    return {f"{e['path']}:{e['line']}" for e in finding["evidence"]}


# (fragment, severity of KV301's finding, lines it must cite)
SATURATED = [
    ("vllm-v0-preempt-warning-traceback-2.log", "warning", [1]),
    ("sglang-decode-oom-retract-multi-tp-10.log", "warning", [1, 4]),
    ("sglang-retract-kv-full-14.log", "warning", [1]),
    ("sglang-decode-oom-runtimeerror-12.log", "error", [1]),
    ("sglang-usage-full-then-retract-11.log", "error", [6]),
    ("sglang-decode-high-usage-queue-9.log", "error", [1]),
]


@pytest.mark.parametrize(("name", "severity", "lines"), SATURATED, ids=[s[0] for s in SATURATED])
def test_the_fragment_alone_is_saturation(name: str, severity: str, lines: list[int]) -> None:
    _, doc = _analyse(name)
    assert doc["verdict"]["primary"] == "saturation", doc["verdict"]
    finding = _kv301(doc)
    assert finding["severity"] == severity
    assert {f"{name}:{n}" for n in lines} <= _cited(finding)
    # One paste, no /metrics, no pool size: never more than low.
    assert doc["verdict"]["confidence"] == "low"


NEAR_MISSES = [
    "vllm-v0-stats-0.3-1.log",  # 82 % with 3 pending, one line
    "vllm-v1-stats-0.9-noproc-5.log",  # 57.9 % with 4 waiting
    "vllm-v1-stats-glued-lines-6.log",  # 91-92 % with nothing waiting
    "sglang-hybrid-swa-after-retract-8.log",  # 0.92 after a retraction the paste does not hold
]


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_the_near_miss_stays_undecided(name: str) -> None:
    _, doc = _analyse(name)
    assert doc["verdict"]["primary"] == "insufficient_evidence", doc["verdict"]
    assert not [f for f in doc["findings"] if f["code"] == "KV301"]


_RETRACTION = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: (?P<rank>TP\d+))?\] .*#retracted_reqs: "
    r"(?P<n>\d+), #new_token_ratio: (?P<before>[\d.]+) -> (?P<after>[\d.]+)",
    re.M,
)


def _retractions(text: str) -> tuple[set[tuple[str, ...]], set[str]]:
    """(distinct events as (time, count, ratios), ranks that printed them) from the text."""
    found = list(_RETRACTION.finditer(text))
    events = {(m["ts"], m["n"], m["before"], m["after"]) for m in found}
    return events, {m["rank"] for m in found if m["rank"]}


@pytest.mark.parametrize(
    "name", ["sglang-decode-oom-retract-multi-tp-10.log", "sglang-retract-kv-full-14.log"]
)
def test_a_retraction_title_quotes_the_engines_numbers(name: str) -> None:
    path, doc = _analyse(name)
    events, ranks = _retractions(path.read_text())
    finding = _kv301(doc)
    title = finding["title"]
    retracted = sum(int(e[1]) for e in events)
    assert f"{retracted} retraction" in title
    for _, _, before, after in events:
        assert f"{before} -> {after}" in title
    if len(ranks) > 1:
        numbers = sorted(int(r[2:]) for r in ranks)
        assert f"{len(ranks)} ranks (TP{numbers[0]}-TP{numbers[-1]})" in title
    times = sorted(datetime.fromisoformat(e[0]) for e in events)
    span = (times[-1] - times[0]).total_seconds() if len(times) > 1 else None
    assert finding["extent"] == {"observations": len(events), "seconds": span}


def test_a_preemption_title_quotes_the_cumulative_count() -> None:
    path, doc = _analyse("vllm-v0-preempt-warning-traceback-2.log")
    count = re.search(r"total_num_cumulative_preemption=(\d+)", path.read_text())
    assert count is not None
    finding = _kv301(doc)
    assert f"total_num_cumulative_preemption={count[1]}" in finding["title"]
    assert "RECOMPUTE" in finding["title"]
    assert finding["extent"] == {"observations": int(count[1]), "seconds": None}


def test_the_decode_oom_crash_quotes_tokens_asked_and_available() -> None:
    path, doc = _analyse("sglang-decode-oom-runtimeerror-12.log")
    text = path.read_text()
    asked = re.search(r"Try to allocate (\d+) tokens", text)
    left = re.search(r"Avaliable tokens: (\d+)", text)
    assert asked is not None and left is not None
    title = _kv301(doc)["title"]
    assert f"{int(asked[1]):,} tokens asked, {int(left[1]):,} available" in title
    assert "Decode out of memory" in title


def test_stats_lines_extent_is_the_full_intervals_with_a_queue() -> None:
    path, doc = _analyse("sglang-decode-high-usage-queue-9.log")
    full_with_queue = re.findall(
        r"^\[([\d: -]+) TP0\] Decode batch.*token usage: (0\.9\d|1\.00).*#queue-req: [1-9]",
        path.read_text(),
        re.M,
    )
    times = [datetime.fromisoformat(t) for t, _ in full_with_queue]
    span = (max(times) - min(times)).total_seconds()
    assert _kv301(doc)["extent"] == {"observations": len(times), "seconds": span}


# --- the confidence term for the extent ---------------------------------------------------


def _primary(extent: Extent | None, severity: Severity = Severity.ERROR) -> Finding:
    ev = (Evidence("server.log", 1, None, "kv_cache_usage", 1.0, "line"),)
    cls = IncidentClass.SATURATION
    return Finding("KV301", "peak.kv_saturation", 3, severity, "t", ev, implies=cls, extent=extent)


@pytest.mark.parametrize(
    ("extent", "term"),
    [
        (None, 0),  # a rule that measures no extent keeps the score it had
        (Extent(1, None), -1),  # one line
        (Extent(1, 900.0), -1),  # one observation, whatever span it is said to cover
        (Extent(5, 0.0), -1),  # five stats lines within one second: a burst
        (Extent(5, BRIEF_SECONDS - 1), -1),
        (Extent(101, None), 0),  # one line carrying the engine's count of 101 events
        (Extent(11, BRIEF_SECONDS), 0),
        (Extent(11, SUSTAINED_SECONDS - 1), 0),
        (Extent(2, SUSTAINED_SECONDS), 0),  # two sightings far apart are no sustained run
        (Extent(31, SUSTAINED_SECONDS), 1),
    ],
)
def test_extent_term(extent: Extent | None, term: int) -> None:
    assert extent_term(extent) == term


def test_confidence_grows_with_how_long_the_pool_was_full() -> None:
    order = [Confidence.LOW, Confidence.MEDIUM, Confidence.HIGH]
    gap = [MissingEvidence("no /metrics scrapes", "x")]
    levels = [
        confidence(p, [p], gap)
        for p in (
            _primary(Extent(1, None)),
            _primary(Extent(6, 30.0)),
            _primary(Extent(12, 120.0)),
            _primary(Extent(60, 600.0)),
        )
    ]
    assert [order.index(level) for level in levels] == sorted(order.index(x) for x in levels)
    assert levels[0] is Confidence.LOW and levels[-1] is Confidence.HIGH
    # The score the other terms give (one source, error grade, one layer-3 gap) is untouched by
    # a condition of moderate length and by a rule that measures none.
    assert levels[2] is confidence(_primary(None), [], gap) is Confidence.MEDIUM


def test_confidence_falls_with_what_is_missing_whatever_the_extent() -> None:
    sustained = _primary(Extent(60, 600.0))
    layer3 = [MissingEvidence("no /metrics scrapes", "x"), MissingEvidence("no server log", "x")]
    assert confidence(sustained, [], []) is Confidence.HIGH
    assert confidence(sustained, [], layer3[:1]) is Confidence.HIGH
    assert confidence(sustained, [], layer3) is Confidence.MEDIUM
    assert confidence(_primary(Extent(1, None), Severity.WARNING), [], layer3) is Confidence.LOW


@pytest.mark.parametrize(
    "message",
    [
        # vLLM's block pool and evictor when an allocation finds nothing free (their
        # format strings in vllm/v1/core/block_pool.py, vllm/core/evictor.py).
        "ValueError: Cannot get 17 free blocks from the pool",
        "ValueError: Out of memory! No free blocks are available.",
        "ValueError: No usable cache memory left",
    ],
)
def test_a_block_pool_with_nothing_free_is_saturation(tmp_path: Path, message: str) -> None:
    (tmp_path / "server.log").write_text(f"ERROR 03-27 10:29:13 [core.py:620] {message}\n")
    _, doc = analyze_json(tmp_path)
    assert doc["verdict"]["primary"] == "saturation"
    assert message in _kv301(doc)["title"]
