"""Property tests over the line-oriented JSON and log parsers: any bytes in, every line
accounted for, no exception, frames the store accepts.

The default (CI) profile runs a few dozen cases per test; `--hypothesis-profile=deep`
runs 10,000 (tests/conftest.py).
"""

from __future__ import annotations

import json

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.schema.fieldtypes import convert, convert_fields
from tests.property_support import (
    any_bytes,
    check_ingest,
    encode,
    hostile_number,
    hostile_word,
    lines_from,
)

# Every sample line of the vLLM format pack: real lines of every version, each one line.
_PACK = load_pack("vllm_log")
VLLM_LINES = tuple(
    line
    for group in (_PACK.events, _PACK.records, _PACK.envelope)
    for item in group
    for sample in item.samples
    for line in sample.line.split("\n")
)


@given(any_bytes())
def test_vllm_log_any_bytes(data: bytes) -> None:
    check_ingest("vllm_log", "server.log", data)


@given(lines_from(VLLM_LINES))
def test_vllm_log_real_lines_mutated(data: bytes) -> None:
    check_ingest("vllm_log", "server.log", data)


# Values of every JSON type, hostile strings and numbers among them.
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | hostile_word
    | hostile_number
)
json_value = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _object_lines(keys: tuple[str, ...]) -> st.SearchStrategy[bytes]:
    """JSON-lines files whose objects use the parser's own keys with values of any type."""
    obj = st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), json_value, max_size=8)
    line = obj.map(lambda o: json.dumps(o, allow_nan=True)) | st.text(max_size=30)

    @st.composite
    def files(draw: st.DrawFn) -> bytes:
        lines = draw(st.lists(line, max_size=10))
        if lines and draw(st.booleans()):
            lines[-1] = lines[-1][: draw(st.integers(0, len(lines[-1])))]  # truncated
        return encode("\n".join(lines) + draw(st.sampled_from(["", "\n"])), draw)

    return files()


CLIENT_KEYS = (
    "req",
    "request_id",
    "phase",
    "send_ts",
    "first_token_ts",
    "end_ts",
    "prompt_tokens",
    "max_tokens",
    "completion_tokens",
    "ttft_s",
    "e2e_s",
    "http_status",
    "status",
    "finish_reason",
    "error",
)
SCRAPE_LOG_KEYS = ("ts", "time", "timestamp", "ts_done", "file", "http_status", "bytes", "error")


@given(any_bytes())
def test_client_requests_any_bytes(data: bytes) -> None:
    check_ingest("client_requests", "requests.jsonl", data)


@given(_object_lines(CLIENT_KEYS))
def test_client_requests_any_values(data: bytes) -> None:
    check_ingest("client_requests", "requests.jsonl", data)


@given(any_bytes())
def test_scrape_log_any_bytes(data: bytes) -> None:
    check_ingest("scrape_log", "scrapes.jsonl", data)


@given(_object_lines(SCRAPE_LOG_KEYS))
def test_scrape_log_any_values(data: bytes) -> None:
    check_ingest("scrape_log", "scrapes.jsonl", data)


_NUMBERS = st.one_of(
    st.none(),
    st.integers(-(10**25), 10**25).map(str),
    st.floats(allow_nan=True).map(str),
    st.from_regex(r"[-+]?[0-9,.]{1,24}", fullmatch=True),
    hostile_number,
    st.text(max_size=6),
)


@given(st.lists(_NUMBERS, min_size=1, max_size=8), st.sampled_from(["int", "float"]))
def test_typed_fields_the_quick_way_equal_the_full_conversion(
    values: list[str | None], ftype: str
) -> None:
    """convert_fields casts plain numbers at once; it must give what `convert` gives on
    every value, separators, saturation and junk included."""
    frame = pl.DataFrame({"v": values}, schema={"v": pl.String})
    quick = convert_fields(frame, {"v": ftype})
    full = frame.with_columns(convert("v", ftype))
    assert quick.equals(full), (values, quick["v"].to_list(), full["v"].to_list())
