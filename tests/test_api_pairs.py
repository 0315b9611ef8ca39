"""Prometheus API JSON read with its sample pairs left as text (ingest/api_pairs.py).

The shortcut must never read a document differently from json.loads: the same structure,
the same pairs, the same refusals. The fetch and the ingester built on it must give what
the full parse gives, byte for byte and row for row, on the real saturation run.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kvdiag.analyzer.ingest.metrics import api_export as prom_api
from kvdiag.analyzer.ingest.metrics.api_pairs import PairArray, compact_pairs, split_pairs
from kvdiag.analyzer.live.client import LiveSourceError, Matrix
from kvdiag.analyzer.live.fetch import merge_results, render_response
from tests.metric_support import ingest, write
from tests.test_prom_exports import _matrix


def expand(found: tuple[Any, list[PairArray]], text: str) -> Any:
    """The document with each PairArray replaced by the pairs json.loads reads from it."""
    doc, _ = found

    def walk(node: Any) -> Any:
        if isinstance(node, PairArray):
            return json.loads(f"[{node.text(text)}]")
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(doc)


plain_value = st.sampled_from(["0.5", "NaN", "+Inf", "-Inf", "1e+06", "0", "", "-2.5e-07"])
odd_value = st.text(max_size=6) | st.floats(allow_nan=False) | st.none()
stamp = st.integers(0, 2**40) | st.floats(0, 2e9, allow_nan=False)
pair = st.tuples(stamp, plain_value).map(list) | st.tuples(stamp, odd_value).map(list)
# Label values that look like pairs, `"values": [...]`, quotes and brackets.
label = st.sampled_from(['[1, ", "]', '"values": [[1,"2"]]', "values", "]],[[", "\\"]) | st.text(
    max_size=8
)
series = st.fixed_dictionaries(
    {"metric": st.dictionaries(st.sampled_from(["__name__", "values", "a", "le"]), label)},
    optional={"values": st.lists(pair, max_size=5) | label, "value": pair},
)
document = st.fixed_dictionaries(
    {
        "status": st.just("success"),
        "data": st.fixed_dictionaries(
            {"resultType": st.just("matrix"), "result": st.lists(series, max_size=4)}
        ),
    }
)
layout = st.sampled_from([None, 0, 1, 2])  # json.dumps indent: one line, or spread over lines


@given(document, layout)
@example({"data": {"result": [{"metric": {"values": '"values": [[1,"2"]]'}}]}}, None)
def test_the_document_is_what_json_loads_reads(doc: Any, indent: int | None) -> None:
    text = json.dumps(doc, indent=indent)
    assert expand(split_pairs(text), text) == json.loads(text)


@given(document, st.data())
def test_a_broken_document_is_refused_as_json_loads_refuses_it(doc: Any, data: Any) -> None:
    text = json.dumps(doc, indent=1)
    cut = data.draw(st.integers(0, len(text)))
    broken = text[:cut] + data.draw(st.sampled_from(["", "]", ",", '"', "}", "[1,"])) + text[cut:]
    try:
        expected = json.loads(broken)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as raised:
            split_pairs(broken)
        assert (raised.value.lineno, raised.value.msg) == (exc.lineno, exc.msg)
    else:
        assert expand(split_pairs(broken), broken) == expected


def test_plain_arrays_are_left_as_text_and_counted() -> None:
    text = json.dumps(_matrix(), separators=(",", ":"))  # as Prometheus writes it
    doc, arrays = split_pairs(text)
    result = doc["data"]["result"]
    assert [item["values"] for item in result] == arrays
    assert [a.count for a in arrays] == [len(s["values"]) for s in _matrix()["data"]["result"]]
    t, v = _matrix()["data"]["result"][0]["values"][0]
    assert compact_pairs(text, arrays[0]).startswith(f'[{t!r},"{v}"],[')


def test_fetched_pairs_render_as_the_parsed_ones_do() -> None:
    """The live source writes the server's pair text; the parsed pairs must give the same
    bytes, chunked or not."""
    doc = _matrix()
    text = json.dumps(doc, separators=(",", ":"))
    header = {"query": "max by (instance) (x)", "series_name": "x"}
    kept = render_response(header, merge_results([_answer(text)]))
    parsed = render_response(header, merge_results([Matrix(doc["data"]["result"], "")]))
    halves = [_answer(json.dumps(_half(doc, h), separators=(",", ":"))) for h in (0, 1)]
    assert kept == parsed == render_response(header, merge_results(halves))
    assert kept.count(b"\n") > sum(len(s["values"]) for s in doc["data"]["result"])


def _answer(text: str) -> Matrix:
    found, _ = split_pairs(text)
    return Matrix(found["data"]["result"], text)


def _half(doc: dict[str, Any], which: int) -> dict[str, Any]:
    result = []
    for item in doc["data"]["result"]:
        cut = len(item["values"]) // 2
        result.append({**item, "values": item["values"][cut:] if which else item["values"][:cut]})
    return {**doc, "data": {**doc["data"], "result": result}}


def test_the_ingester_reads_kept_pairs_as_the_full_parse(tmp_path: Path) -> None:
    """kvdiag's own layout (a pair a line, read from the text) and `jq .`'s (each number on
    its own line: parsed whole) store the same rows; each cites the line of its pair."""
    doc = _matrix()
    ours = render_response({"query": "q"}, merge_results([Matrix(doc["data"]["result"], "")]))
    write(tmp_path / "a", "ours.json", ours.decode())
    write(tmp_path / "b", "jq.json", json.dumps(doc, indent=2))
    fast = ingest(tmp_path / "a").table("metric_samples")
    full = ingest(tmp_path / "b").table("metric_samples")
    columns = ["name", "replica", "engine", "model_name", "ts", "value"]
    assert fast.height == full.height > 0
    assert fast.select(columns).sort(columns).equals(full.select(columns).sort(columns))
    lines = ours.decode().split("\n")
    for row in fast.iter_rows(named=True):
        pair_text = row["raw"].removesuffix(" from q")
        assert lines[row["source_line"] - 1].rstrip(",") == pair_text


def test_a_long_document_is_stored_in_chunks_each_sample_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _matrix()
    ours = render_response({"query": "q"}, merge_results([Matrix(doc["data"]["result"], "")]))
    write(tmp_path, "ours.json", ours.decode())
    whole = ingest(tmp_path).table("metric_samples")
    monkeypatch.setattr(prom_api, "CHUNK_ROWS", 7)
    chunked = ingest(tmp_path)
    assert chunked.table("metric_samples").equals(whole)
    assert chunked.account("ours.json").records == whole.height == 240


known_name = st.sampled_from(
    ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"]
)
sane_pair = st.tuples(
    st.integers(1_700_000_000, 1_900_000_000) | st.floats(1.7e9, 1.9e9), plain_value
).map(list)
stored_series = st.fixed_dictionaries(
    {
        "metric": st.fixed_dictionaries(
            {"__name__": known_name, "instance": st.sampled_from(["a:1", "b:2"])},
            optional={"engine": st.sampled_from(["0", "1"]), "trick": label},
        ),
        "values": st.lists(sane_pair, max_size=6),
    }
)


@given(st.lists(stored_series, max_size=5))
def test_any_export_stores_the_same_rows_from_kept_pairs_as_from_the_full_parse(
    result: list[dict[str, Any]],
) -> None:
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    ours = render_response({"query": "q"}, merge_results([Matrix(result, "")])).decode()
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp) / "a", "ours.json", ours)
        write(Path(tmp) / "b", "jq.json", json.dumps(doc, indent=2))
        fast = ingest(Path(tmp) / "a").tables.get("metric_samples")
        full = ingest(Path(tmp) / "b").tables.get("metric_samples")
    if fast is None or full is None:
        assert fast is full is None
        return
    columns = ["name", "replica", "engine", "ts", "value"]
    assert (
        fast.select(columns)
        .sort(columns, nulls_last=True)
        .equals(full.select(columns).sort(columns, nulls_last=True))
    )


@pytest.mark.parametrize(
    "item", [[1, "2"], {"metric": "x", "values": []}, {"metric": {}, "values": {"a": 1}}]
)
def test_a_series_that_is_not_one_is_the_servers_error(item: Any) -> None:
    with pytest.raises(LiveSourceError, match="not one"):
        merge_results([Matrix([item], "")])
    assert merge_results([Matrix([{"values": []}], "")])[0].metric == {}  # no labels: fine
