"""ascii_only: on ASCII lines the rewritten regex matches and captures what the original
does (the fast lane's stats extraction relies on it), and it refuses what it cannot
rewrite."""

from __future__ import annotations

import re

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.logs.triage import vllm_lanes
from kvdiag.analyzer.text.ascii_regex import ascii_only

_HOT = vllm_lanes().hot
_PACK = load_pack("vllm_log")
_SAMPLES = [s.line for e in _PACK.events for s in e.samples for _ in [0] if "\n" not in s.line]


def _same_groups(lines: list[str], regex: str) -> None:
    frame = pl.DataFrame({"text": lines}, schema={"text": pl.String})
    text = pl.col("text")
    original = frame.select(text.str.extract_groups(regex))
    rewritten = frame.select(text.str.extract_groups(ascii_only(regex)))
    assert rewritten.equals(original)


def test_every_hot_event_has_an_ascii_form() -> None:
    assert all(hot.ascii_regex == ascii_only(hot.regex) for hot in _HOT)


@pytest.mark.parametrize("hot", _HOT, ids=lambda h: h.event.id)
def test_the_ascii_form_captures_what_the_original_does_on_every_ascii_sample(hot) -> None:  # type: ignore[no-untyped-def]
    lines = [line for line in _SAMPLES if line.isascii()]
    assert any(re.search(hot.event.literal, line) for line in lines)  # some do match
    _same_groups(lines, hot.regex)


_PIECES = st.sampled_from(
    [
        "(APIServer pid=1) ",
        "(Engine Core pid=12, ip=10.0.0.1) ",
        "INFO ",
        "WARNING ",
        "11-29 13:35:11 ",
        "11-29 13:35:11.123 ",
        "[loggers.py:335] ",
        "[loggers.py:335]",
        "Engine 000: ",
        "2 Engines Aggregated: ",
        "Avg prompt throughput: 808.1 tokens/s, ",
        "Avg generation throughput: 18.3 tokens/s, ",
        "Running: 6 reqs, ",
        "Waiting: 30 reqs",
        ", Swapped: 0 reqs, Pending: 0 reqs",
        ", Deferred: 2 reqs",
        ", KV fetch: a, b, c",
        ", Preemptions: 4",
        ", GPU KV cache usage: 95.5%",
        ", CPU + host KV cache usage: 9.5%",
        ", Prefix cache hit rate: 0.0%",
        ", MM cache hit rate: 1.5%",
        "\t",
        " ",
        "]",
        "(",
        "\x1b",
        "7",
    ]
)


@given(st.lists(st.lists(_PIECES, max_size=14).map("".join), min_size=1, max_size=20))
def test_the_ascii_form_captures_what_the_original_does_on_generated_lines(
    lines: list[str],
) -> None:
    for hot in _HOT:
        _same_groups(lines, hot.regex)


@given(st.lists(st.text(alphabet=st.characters(max_codepoint=127), max_size=30), min_size=1))
def test_classes_cut_to_ascii_keep_their_matches(lines: list[str]) -> None:
    for pattern in (r"^[^()\s:]+?(\d+)\s*(\w*)", r"(.)([\d.,]+)[^,]*$", r"([]x-]+)(\w?)"):
        _same_groups(lines, pattern)


@pytest.mark.parametrize("pattern", [r"\D", r"\p{L}", r"[[:alpha:]]", "[abc", "x\\"])
def test_what_has_no_ascii_form_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError):
        ascii_only(pattern)
