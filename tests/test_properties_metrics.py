"""Property tests over the metric parsers: Prometheus text exposition, Prometheus API JSON
and Grafana CSV. Any bytes, and real shapes with hostile names, labels and values: no
exception, every line accounted for, frames the store accepts."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from kvdiag.analyzer.schema.aliases import load_aliases
from tests.conftest import FIXTURES
from tests.property_support import (
    any_bytes,
    check_ingest,
    deep_nesting,
    encode,
    encode_json,
    hostile_number,
    hostile_word,
    lines_from,
)

_SCRAPE = sorted((FIXTURES / "vllm-b-saturation" / "incident" / "metrics").glob("*.prom"))[40]
SCRAPE_LINES = tuple(_SCRAPE.read_text().splitlines())
KNOWN_NAMES = tuple(sorted(load_aliases().lookup_map()))

metric_name = st.sampled_from(KNOWN_NAMES) | st.from_regex(r"[a-zA-Z_:][\w:]{0,12}", fullmatch=True)
label_value = (
    hostile_word.map(lambda t: t.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
    | hostile_word
)
labels = st.dictionaries(
    st.sampled_from(["engine", "model_name", "le", "reason", "instance"]) | st.text(max_size=5),
    label_value,
    max_size=4,
)
timestamp = st.sampled_from(["", " 1795959281911", " 1795959281.911", " -1", " 1e400"]) | (
    hostile_number.map(lambda n: f" {n}")
)


@st.composite
def sample_line(draw: st.DrawFn) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in draw(labels).items())
    head = draw(metric_name) + (f"{{{body}}}" if body or draw(st.booleans()) else "")
    return f"{head} {draw(hostile_number)}{draw(timestamp)}"


comment_line = st.sampled_from(
    [
        "# TYPE vllm:kv_cache_usage_perc gauge",
        "# TYPE vllm:num_preemptions counter",
        "# HELP vllm:num_requests_waiting Number of requests waiting.",
        "# EOF",
        "# scrape at 1795959281.911",
        "1795959282",
        "# ts=2026-11-29T13:34:39Z",
    ]
) | hostile_word.map(lambda t: f"# {t}")


@st.composite
def exposition(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(sample_line() | comment_line | st.text(max_size=30), max_size=15))
    return encode("\n".join(lines) + draw(st.sampled_from(["", "\n"])), draw)


@given(any_bytes())
def test_prom_text_any_bytes(data: bytes) -> None:
    check_ingest("prom_text", "metrics.prom", data)


@given(exposition())
def test_prom_text_hostile_samples(data: bytes) -> None:
    check_ingest("prom_text", "metrics.prom", data)


@given(lines_from(SCRAPE_LINES, max_lines=30))
def test_prom_text_real_scrape_mutated(data: bytes) -> None:
    check_ingest("prom_text", "1795959281.911.prom", data)


# ------------------------------------------------------------------ Prometheus API JSON

json_scalar = (
    st.none() | st.booleans() | st.integers() | st.floats() | hostile_word | hostile_number
)
any_json = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
pair = st.tuples(hostile_number | st.floats() | st.integers(), hostile_number | st.floats()).map(
    list
)


@st.composite
def series(draw: st.DrawFn) -> dict:
    metric = draw(st.dictionaries(st.sampled_from(["__name__", "engine", "instance"]), label_value))
    if draw(st.booleans()):
        metric["__name__"] = draw(metric_name)
    item: dict = {
        "metric": draw(
            st.sampled_from([metric, None, [], "x"])
            if draw(st.integers(0, 9)) == 0
            else st.just(metric)
        )
    }
    key = draw(st.sampled_from(["values", "value", "histogram", "other"]))
    item[key] = (
        draw(st.lists(pair, max_size=4) | any_json) if key == "values" else draw(pair | any_json)
    )
    return item


@st.composite
def api_result(draw: st.DrawFn) -> bytes:
    result = draw(st.lists(series(), max_size=4) | any_json)
    data = {
        "resultType": draw(st.sampled_from(["matrix", "vector", "scalar", "string", 7])),
        "result": result,
    }
    doc = {"status": draw(st.sampled_from(["success", "error"])), "data": data}
    if draw(st.booleans()):
        doc = draw(st.lists(st.just(doc) | any_json, min_size=1, max_size=3))
    if draw(st.booleans()):  # kvdiag's own layout, a plain pair a line: the pairs stay text
        return encode(_PAIR_LINES.sub(r"[\1, \2]", json.dumps(doc, indent=1)), draw)
    return encode_json(doc, draw, indent=1)


_PAIR_LINES = re.compile(r'\[\n *(-?[0-9][0-9.eE+-]*),\n *("[0-9A-Za-z.+-]*")\n *\]')


@given(any_bytes())
def test_prom_api_any_bytes(data: bytes) -> None:
    check_ingest("prom_api", "export.json", data)


@given(api_result())
def test_prom_api_hostile_results(data: bytes) -> None:
    check_ingest("prom_api", "export.json", data)


plain_pair = st.tuples(
    st.integers() | st.floats(allow_nan=False, allow_infinity=False),
    hostile_number.filter(re.compile(r"[0-9A-Za-z.+-]*").fullmatch),
).map(list)


@st.composite
def kept_pairs_result(draw: st.DrawFn) -> bytes:
    """Matrix results whose pairs are all plain, a pair a line (as kvdiag's live source
    writes them): the ingester reads them from the text; labels and names stay hostile."""
    result = [
        {"metric": metric, "values": draw(st.lists(plain_pair, max_size=5))}
        for metric in draw(
            st.lists(
                st.dictionaries(st.sampled_from(["__name__", "engine", "instance"]), label_value)
                | st.fixed_dictionaries({"__name__": metric_name}),
                max_size=4,
            )
        )
    ]
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    text = _PAIR_LINES.sub(r"[\1, \2]", json.dumps(doc, indent=1))
    if draw(st.integers(0, 5)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return encode(text, draw)


@given(kept_pairs_result())
def test_prom_api_kept_pairs(data: bytes) -> None:
    check_ingest("prom_api", "export.json", data)


def test_prom_api_deep_nesting() -> None:
    """Nesting past Python's recursion limit is an input problem, not a crash."""
    data = deep_nesting(b'{"status": "success", "data": ')
    _, problems = check_ingest("prom_api", "export.json", data)
    assert problems


# ------------------------------------------------------------------ Grafana CSV

cell = hostile_number | hostile_word | st.sampled_from(["2026-11-29 13:34:41", "1795959281911"])


@st.composite
def grafana(draw: st.DrawFn) -> bytes:
    sep = draw(st.sampled_from([",", ";", "\t"]))
    if draw(st.booleans()):
        names = draw(
            st.lists(sample_line().map(lambda s: s.rsplit(" ", 1)[0]) | hostile_word, max_size=4)
        )
        header = ["Time", *names]
    else:
        header = ["Series", "Time", "Value"]
    quote = draw(st.booleans())
    fmt = (lambda c: '"' + c.replace('"', '""') + '"') if quote else (lambda c: c)
    rows = [sep.join(fmt(c) for c in header)]
    for _ in range(draw(st.integers(0, 6))):
        width = draw(st.integers(0, len(header) + 1))
        rows.append(sep.join(fmt(draw(cell)) for _ in range(width)))
    if draw(st.booleans()):
        rows.insert(0, f"sep={sep}")
    return encode("\n".join(rows) + draw(st.sampled_from(["", "\n", "\n\n"])), draw)


@given(any_bytes())
def test_grafana_csv_any_bytes(data: bytes) -> None:
    check_ingest("grafana_csv", "panel.csv", data)


@given(grafana())
def test_grafana_csv_hostile_cells(data: bytes) -> None:
    check_ingest("grafana_csv", "panel.csv", data)
