"""Planted secrets of every category, at random places in real log lines: gone after the
redaction, and the line still reads as the same event with the same numbers."""

from __future__ import annotations

import string
from functools import cache
from typing import Any

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.logs.steps import lines_frame, parse_batch
from kvdiag.redact.pseudonyms import Pseudonyms
from kvdiag.redact.scrub import Scrubber
from tests.conftest import FIXTURES

_LOGS = {
    "vllm_log": ["vllm-b-saturation", "vllm-c-prefill-peak-noprefix", "vllm-j-queue-cap-rejects"],
    "sglang_log": ["sglang-saturation-queue", "sglang-j2-decode-oom-kv-pool"],
}
_NUMERIC = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt32, pl.UInt64, pl.Float32, pl.Float64)


def _event(line: str, pack: str) -> list[tuple[str, dict[str, Any]]]:
    """The events a line reads as, with the numeric fields the pack declares (not where in
    the line they were found: a pseudonym is shorter than its value)."""
    parsed = parse_batch(lines_frame([line]), load_pack(pack))
    out = []
    for rows in parsed.events:
        declared = set(rows.event.fields)
        numeric = [c for c, t in rows.frame.schema.items() if t in _NUMERIC and c in declared]
        out.append((rows.event.id, rows.frame.select(numeric).to_dicts()[0] if numeric else {}))
    return sorted(out, key=lambda e: e[0])


@cache
def _event_lines() -> list[tuple[str, str]]:
    """(pack, line) of every real line that reads as an event."""
    out = []
    for pack, names in _LOGS.items():
        for name in names:
            for path in sorted((FIXTURES / name / "incident").glob("*.log")):
                lines = path.read_text().splitlines()
                parsed = parse_batch(lines_frame(lines), load_pack(pack))
                numbers = {n for rows in parsed.events for n in rows.frame["line_no"].to_list()}
                out += [(pack, lines[n - 1]) for n in sorted(numbers)]
    return out


_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"
_POD = "bcdfghjklmnpqrstvwxz2456789"


def _word(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=lo, max_size=hi)


def _label() -> st.SearchStrategy[str]:
    return st.builds(lambda a, b: a + b, _word(string.ascii_lowercase, 1, 1), _word(_HEX, 2, 8))


def _token() -> st.SearchStrategy[str]:
    """A key-like token: letters with at least one digit."""
    return st.builds(lambda a, d: a + d, _word(_ALNUM, 10, 24), _word(string.digits, 1, 3))


_ip4 = st.builds(
    lambda a, b, c, d: f"{a}.{b}.{c}.{d}",
    st.sampled_from([10, 34, 52, 100, 172, 192, 203]),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(1, 254),
)
_ip6 = st.lists(_word(_HEX[1:], 1, 1).map(lambda h: h + "db8"), min_size=8, max_size=8).map(
    ":".join
)
_fqdn = st.builds(
    lambda a, b, tld: f"{a}.{b}.{tld}",
    _label(),
    _label(),
    st.sampled_from(["internal", "corp", "com", "svc"]),
)
_pod = st.builds(
    lambda name, h, s: f"{name}-{h}7-{s}", _label(), _word(_POD, 7, 9), _word(_POD, 5, 5)
)
# (what is planted, the part of it that must be gone)
PLANTS = st.one_of(
    _ip4.map(lambda v: (v, v)),
    _ip4.map(lambda v: (f"http://{v}:8000/metrics", v)),
    _ip6.map(lambda v: (v, v)),
    _fqdn.map(lambda v: (v, v)),
    _pod.map(lambda v: (f"pod={v}", v)),
    st.builds(lambda u, d: (f"{u}@{d}", f"{u}@{d}"), _label(), _fqdn),
    _word(_ALNUM, 34, 34).map(lambda v: (f"hf_{v}", f"hf_{v}")),
    _word(_ALNUM, 30, 30).map(lambda v: (f"sk-proj-{v}", f"sk-proj-{v}")),
    _token().map(lambda v: (f"--api-key {v}", v)),
    _token().map(lambda v: (f"HF_TOKEN={v}", v)),
    _token().map(lambda v: (f"Authorization: Bearer {v}", v)),
    _label().map(lambda u: (f"/home/{u}/models/x", f"/home/{u}/")),
    _word(_HEX, 32, 32).map(lambda v: (f"cmpl-{v}", v)),
    st.builds(lambda a, b: (f"--model /mnt/{a}/{b}", f"/mnt/{a}/{b}"), _label(), _label()),
)


@given(
    pack=st.sampled_from(sorted(_LOGS)),
    which=st.integers(0, 10**9),
    plant=PLANTS,
    where=st.integers(0, 10**9),
)
def test_a_planted_value_is_gone_and_the_line_reads_the_same(
    pack: str, which: int, plant: tuple[str, str], where: int
) -> None:
    lines = [line for p, line in _event_lines() if p == pack]
    line = lines[which % len(lines)]
    # Within the message: a value inside the logger's header garbles the header itself, and
    # how a garbled header reads depends on the garbage, not on the redaction.
    body = line.find("] ") + 1
    blanks = [i for i, c in enumerate(line) if c == " " and i >= body] or [len(line)]
    at = blanks[where % len(blanks)]
    planted = f"{line[:at]} {plant[0]}{line[at:]}"
    out = Scrubber(Pseudonyms()).scrub(planted, "server.log")
    assert plant[1] not in out, (planted, out)
    assert _event(out, pack) == _event(planted, pack), (planted, out)


def test_the_real_lines_are_many_and_of_both_engines() -> None:
    packs = [pack for pack, _ in _event_lines()]
    assert packs.count("vllm_log") > 100 and packs.count("sglang_log") > 5
