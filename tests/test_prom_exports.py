"""Prometheus API JSON, Grafana CSV and scraper logs, built from the real saturation run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from kvdiag.analyzer.ingest.metrics.scrape_time import scrape_time_from_name
from tests.conftest import FIXTURES
from tests.metric_support import ingest, raw_samples, write

SCRAPES = sorted((FIXTURES / "vllm-b-saturation" / "incident" / "metrics").glob("*.prom"))[:60]
LABELS = '{engine="0",model_name="/opt/tinymodel"}'
SERIES = {
    "vllm:kv_cache_usage_perc": LABELS,
    "vllm:num_requests_waiting": LABELS,
    "vllm:num_preemptions_total": LABELS,
    "vllm:time_to_first_token_seconds_bucket": '{engine="0",le="20.0",model_name="/opt/tinymodel"}',
}
EXTRA = {"instance": "127.0.0.1:8011", "job": "vllm"}


def _truth() -> dict[str, list[tuple[float, float]]]:
    """(unix time, value) per series, read from the raw scrape files."""
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in SERIES}
    for path in SCRAPES:
        raw = raw_samples(path)
        t = float(path.name.removesuffix(".prom"))
        for name, labels in SERIES.items():
            out[name].append((t, raw[(name, labels)][1]))
    return out


def _metric(name: str) -> dict[str, str]:
    labels = dict(pair.split("=") for pair in SERIES[name][1:-1].split(","))
    return {"__name__": name, **{k: v.strip('"') for k, v in labels.items()}, **EXTRA}


def _matrix() -> dict:
    result = [
        {"metric": _metric(name), "values": [[t, repr(v)] for t, v in points]}
        for name, points in _truth().items()
    ]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def _expected() -> pl.DataFrame:
    rows = [
        {"name": name, "ts": datetime.fromtimestamp(t, tz=UTC).replace(tzinfo=None), "value": v}
        for name, points in _truth().items()
        for t, v in points
    ]
    return pl.DataFrame(rows).sort("name", "ts")


def _stored(got_rows: pl.DataFrame) -> pl.DataFrame:
    return got_rows.select("name", "ts", "value").sort("name", "ts")


def test_query_range_matrix_pretty_printed_cites_each_pair(tmp_path: Path) -> None:
    text = json.dumps(_matrix(), indent=2)
    write(tmp_path, "query_range.json", text)
    got = ingest(tmp_path)
    rows = got.table("metric_samples")
    assert got.kinds["query_range.json"] == "prom_api"
    assert _stored(rows).equals(_expected())
    assert set(rows["replica"]) == {"127.0.0.1:8011"}
    lines = text.split("\n")
    for row in rows.sample(20, seed=1).iter_rows(named=True):
        assert lines[row["source_line"] - 1].strip() == "["
        assert lines[row["source_line"]].strip().rstrip(",") == repr(
            row["ts"].replace(tzinfo=UTC).timestamp()
        )
        assert row["raw"].startswith("[ ") and row["raw"].endswith(" ]")
    acct = got.account("query_range.json")
    assert acct.lines_parsed == acct.lines_total == len(lines)


def test_one_line_json_cites_the_file_only(tmp_path: Path) -> None:
    write(tmp_path, "range.json", json.dumps(_matrix()))
    got = ingest(tmp_path)
    rows = got.table("metric_samples")
    assert _stored(rows).equals(_expected())
    assert rows["source_line"].null_count() == rows.height
    assert any("one-line JSON" in n for n in got.account("range.json").notes)


def test_instant_vector_and_unnamed_series(tmp_path: Path) -> None:
    last = SCRAPES[-1]
    t = float(last.name.removesuffix(".prom"))
    raw = raw_samples(last)
    waiting = raw[("vllm:num_requests_waiting", LABELS)][1]
    doc = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": _metric("vllm:num_requests_waiting"), "value": [t, repr(waiting)]},
                {"metric": {"instance": "x"}, "value": [t, "0.25"]},  # rate(...) result
            ],
        },
    }
    write(tmp_path, "query.json", json.dumps(doc, indent=1))
    got = ingest(tmp_path)
    rows = got.table("metric_samples")
    assert rows["value"].to_list() == [waiting]
    assert rows["ts"].to_list() == [scrape_time_from_name(last.name)]
    assert any("without __name__" in n for n in got.account("query.json").notes)


def test_api_error_and_invalid_json_are_problems(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.json",
        json.dumps(
            {
                "status": "error",
                "errorType": "bad_data",
                "error": "parse error",
                "data": {"resultType": "matrix", "result": []},
            }
        ),
    )
    write(
        tmp_path, "b.json", '{"status": "success",\n"data": {"resultType": "matrix", "result": [\n'
    )
    got = ingest(tmp_path)
    messages = {p.path: p.message for p in got.problems}
    assert "query failed: bad_data parse error" in messages["a.json"]
    assert messages["b.json"].startswith("not valid JSON")
    assert got.account("b.json").lines_unmatched == 2  # a truncated download


def _grafana_name(name: str) -> str:
    labels = {k: v for k, v in _metric(name).items() if k != "__name__"}
    body = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{body}}}"


@pytest.mark.parametrize("formatted", [True, False], ids=["formatted-time", "epoch-ms"])
def test_grafana_wide_csv(tmp_path: Path, formatted: bool) -> None:
    truth = _truth()
    names = list(truth)
    header = ",".join(
        '"' + n.replace('"', '""') + '"' for n in ["Time", *map(_grafana_name, names), "{{pod}}"]
    )
    rows = []
    for i, (t, _) in enumerate(truth[names[0]]):
        stamp = (
            datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            if formatted
            else str(round(t * 1000))
        )
        rows.append(",".join([stamp, *(repr(truth[n][i][1]) for n in names), "7"]))
    write(tmp_path, "panel-data.csv", "\r\n".join([header, *rows]) + "\r\n\r\n")
    got = ingest(tmp_path)
    stored = got.table("metric_samples")
    assert got.kinds["panel-data.csv"] == "grafana_csv"
    assert _stored(stored).equals(_expected())
    assert stored.filter(pl.col("ts") == stored["ts"].min())["source_line"].unique().to_list() == [
        2
    ]
    acct = got.account("panel-data.csv")
    assert acct.lines_unmatched == 0 and acct.balanced()
    assert any("'{{pod}}' names no known metric" in n for n in acct.notes)
    assert any("taken as UTC" in n for n in acct.notes) == formatted


def test_grafana_long_csv_with_semicolons(tmp_path: Path) -> None:
    lines = ['"Series";"Time";"Value"']
    for name, points in _truth().items():
        for t, v in points:
            iso = datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")
            lines.append(f'"{_grafana_name(name).replace(chr(34), chr(34) * 2)}";{iso};{v!r}')
    lines.append("not;a;row")
    write(tmp_path, "export.csv", "\n".join(lines) + "\n")
    got = ingest(tmp_path)
    assert _stored(got.table("metric_samples")).equals(_expected())
    acct = got.account("export.csv")
    assert acct.lines_unmatched == 1 and acct.templates[0].first_line == len(lines)


def test_grafana_formatted_values_are_named_not_guessed(tmp_path: Path) -> None:
    name = _grafana_name("vllm:kv_cache_usage_perc").replace('"', '""')
    write(
        tmp_path, "p.csv", f'"Time","{name}"\n2026-11-29 13:34:41,91.0%\n2026-11-29 13:34:42,0.5\n'
    )
    got = ingest(tmp_path)
    assert got.table("metric_samples")["value"].to_list() == [0.5]
    assert any("not plain numbers" in n and "91.0%" in n for n in got.account("p.csv").notes)


def test_scrape_log_shapes(tmp_path: Path) -> None:
    attempts = [
        {"time": "2026-11-29T13:34:41Z", "path": "a.prom", "status_code": 200, "err": None},
        {
            "ts": 1795959282.0,
            "ts_done": 1795959282.5,
            "file": None,
            "http_status": 503,
            "error": None,
        },
        {"ts": 1795959283.0, "file": None, "http_status": None, "bytes": 0, "error": "timed out"},
    ]
    lines = [
        *(json.dumps(a) for a in attempts),
        "",
        "Traceback (most recent call last):",
    ]
    write(tmp_path, "run/scrape-log.jsonl", "\n".join(lines) + "\n")
    got = ingest(tmp_path)
    rows = got.table("scrapes").sort("source_line")
    assert rows["status"].to_list() == ["ok", "error", "error"]
    assert rows["error"].to_list() == [None, "HTTP 503", "timed out"]
    assert rows["file"].to_list() == ["run/a.prom", None, None]
    assert rows["duration_s"].to_list()[1] == 0.5
    assert rows["ts"][0] == datetime(2026, 11, 29, 13, 34, 41)
    acct = got.account("run/scrape-log.jsonl")
    assert (acct.lines_total, acct.lines_parsed, acct.lines_unmatched) == (5, 4, 1)


def test_client_request_logs_are_not_scrape_logs(tmp_path: Path) -> None:
    src = FIXTURES / "vllm-b-saturation" / "incident" / "requests.jsonl"
    write(tmp_path, "requests.jsonl", src.read_bytes())
    assert ingest(tmp_path).kinds.get("requests.jsonl") != "scrape_log"
