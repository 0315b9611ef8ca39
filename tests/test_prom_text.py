"""Prometheus text exposition and OpenMetrics through the real ingester."""

from __future__ import annotations

import gzip
import json
import math
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import classify_file
from tests.conftest import REALDATA, shared
from tests.metric_support import HEAD, ingest, write


def _one(tmp_path: Path, text: str | bytes, name: str = "metrics.prom") -> pl.DataFrame:
    write(tmp_path, name, text)
    got = ingest(tmp_path)
    acct = got.account(name)
    assert acct.balanced()
    return got.table("metric_samples").sort("source_line")


@pytest.mark.parametrize(
    ("line", "value", "labels"),
    [
        ('vllm:num_requests_running{engine="0"} 3.0', 3.0, {"engine": "0"}),
        ("vllm:num_requests_running 3", 3.0, {}),
        ("vllm:num_requests_running NaN", math.nan, {}),
        ("vllm:num_requests_running +Inf", math.inf, {}),
        ("vllm:num_requests_running -Inf", -math.inf, {}),
        ("vllm:num_requests_running 1.5e+09", 1.5e9, {}),
        ('vllm:num_requests_running{a="x\\\\y"} 1', 1.0, {"a": "x\\y"}),
        ('vllm:num_requests_running{a="say \\"hi\\""} 1', 1.0, {"a": 'say "hi"'}),
        ('vllm:num_requests_running{a="two\\nlines"} 1', 1.0, {"a": "two\nlines"}),
        ('vllm:num_requests_running{a="\\\\n"} 1', 1.0, {"a": "\\n"}),
        ('vllm:num_requests_running{a="b} 7",c="d e"} 2', 2.0, {"a": "b} 7", "c": "d e"}),
        ('vllm:num_requests_running{a="x",} 4', 4.0, {"a": "x"}),
        ('vllm:num_requests_running{ a = "x" , b="y" } 4', 4.0, {"a": "x", "b": "y"}),
        ("vllm:num_requests_running\t5", 5.0, {}),
        ("vllm:num_requests_running   6   ", 6.0, {}),
        ('vllm:num_requests_running{a="é ✓"} 7', 7.0, {"a": "é ✓"}),
        ("vllm:num_requests_running{} 8", 8.0, {}),
    ],
    ids=lambda v: None,
)
def test_sample_line_parses_to_value_and_labels(
    tmp_path: Path, line: str, value: float, labels: dict[str, str]
) -> None:
    rows = _one(tmp_path, HEAD + line + "\n")
    assert rows.height == 1
    row = rows.row(0, named=True)
    assert row["metric"] == "num_requests_running"
    assert row["source_line"] == 3
    assert row["raw"] == line
    got = row["value"]
    assert (math.isnan(got) and math.isnan(value)) or got == value
    assert json.loads(row["labels"]) == labels


@pytest.mark.parametrize(
    "line",
    [
        "vllm:num_requests_running",  # no value
        "vllm:num_requests_running abc",  # not a number
        "vllm:num_requests_running 1 2 3",  # too many fields
        'vllm:num_requests_running{engine="0" 1',  # unclosed label set
        "vllm:num_requests_running{engine=0} 1",  # unquoted label value
        'vllm:num_requests_running{engine="0" model="x"} 1',  # missing comma
        '{"vllm:num_requests_running"} 1',  # UTF-8 quoted name: not accepted
        "9vllm 1",  # name starting with a digit
        "curl -s http://localhost:8000/metrics",
    ],
)
def test_invalid_line_is_counted_unmatched_not_stored(tmp_path: Path, line: str) -> None:
    write(tmp_path, "metrics.prom", HEAD + line + "\n")
    got = ingest(tmp_path)
    acct = got.account("metrics.prom")
    assert (acct.lines_total, acct.lines_parsed, acct.lines_unmatched) == (3, 2, 1)
    assert got.table("metric_samples").is_empty()
    assert acct.templates[0].first_line == 3


def test_openmetrics_exemplars_eof_and_created_series(tmp_path: Path) -> None:
    text = (
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        "# UNIT vllm:time_to_first_token_seconds seconds\n"
        'vllm:time_to_first_token_seconds_bucket{le="0.5"} 4 # {trace_id="abc"} 0.3 1.7e9\n'
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 5\n'
        "vllm:time_to_first_token_seconds_count 5\n"
        "vllm:time_to_first_token_seconds_sum 2.5\n"
        "vllm:time_to_first_token_seconds_created 1795959280.39\n"
        "# EOF\n"
    )
    rows = _one(tmp_path, text)
    assert rows["suffix"].to_list() == ["bucket", "bucket", "count", "sum", "created"]
    assert rows["le"].to_list()[:2] == [0.5, math.inf]
    assert rows["value"].to_list() == [4.0, 5.0, 5.0, 2.5, 1795959280.39]
    assert set(rows["series"]) == {"{}"}


def test_sample_timestamps_milliseconds_and_seconds(tmp_path: Path) -> None:
    text = (
        HEAD
        + "vllm:num_requests_running 1 1795959281911\nvllm:num_requests_running 2 1795959282.5\n"
    )
    rows = _one(tmp_path, text)
    assert rows["ts"].to_list() == [
        datetime(2026, 11, 29, 13, 34, 41, 911000),
        datetime(2026, 11, 29, 13, 34, 42, 500000),
    ]


def test_crlf_gzip_and_undecodable_bytes(tmp_path: Path) -> None:
    body = (HEAD + 'vllm:num_requests_running{a="x"} 3\n').replace("\n", "\r\n").encode()
    body += b"\xff\xfe garbage\r\n"
    write(tmp_path, "metrics.prom.gz", gzip.compress(body))
    got = ingest(tmp_path)
    acct = got.account("metrics.prom.gz")
    assert (acct.lines_total, acct.lines_parsed, acct.lines_undecodable) == (4, 3, 1)
    assert got.table("metric_samples")["raw"].to_list() == ['vllm:num_requests_running{a="x"} 3']


def test_deployment_prefixes_resolve_to_the_engine_names(tmp_path: Path) -> None:
    text = (
        "# TYPE ray_vllm:kv_cache_usage_perc gauge\n"
        'ray_vllm:kv_cache_usage_perc{WorkerId="w"} 0.5\n'
        'ray_vllm_num_requests_waiting{WorkerId="w"} 3\n'
    )
    rows = _one(tmp_path, text)
    assert rows["metric"].to_list() == ["kv_cache_usage", "num_requests_waiting"]
    assert rows["name"].to_list() == [
        "ray_vllm:kv_cache_usage_perc",
        "ray_vllm_num_requests_waiting",
    ]


def test_instance_label_names_the_replica_else_the_folder(tmp_path: Path) -> None:
    text = (
        HEAD + 'vllm:num_requests_running{instance="pod-7:8000"} 1\nvllm:num_requests_running 2\n'
    )
    rows = _one(tmp_path, text)
    assert rows["replica"].to_list() == ["pod-7:8000", "default"]


def test_dcgm_framebuffer_gauges_become_gpu_snapshots(tmp_path: Path) -> None:
    labels = (
        'gpu="{g}",UUID="GPU-{g}",device="nvidia{g}",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"'
    )
    lines = [
        "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).",
        "# TYPE DCGM_FI_DEV_FB_FREE gauge",
    ]
    for field, values in (
        ("FREE", (6000, 500)),
        ("USED", (74213, 79713)),
        ("RESERVED", (346, 346)),
    ):
        for g, v in enumerate(values):
            lines.append(f"DCGM_FI_DEV_FB_{field}{{{labels.format(g=g)}}} {v}")
    write(tmp_path, "dcgm/1795959281.prom", "\n".join(lines) + "\n")
    write(tmp_path, "dcgm/1795959282.prom", "\n".join(lines) + "\n")
    got = ingest(tmp_path)
    gpus = got.table("gpu_snapshots").sort("ts", "gpu")
    assert gpus.height == 4
    first = gpus.row(0, named=True)
    assert first["gpu"] == 0 and first["uuid"] == "GPU-0" and first["host"] == "node-1"
    assert first["name"] == "NVIDIA H100 80GB HBM3" and first["source_kind"] == "dcgm"
    assert (first["memory_free_mib"], first["memory_used_mib"]) == (6000.0, 74213.0)
    assert first["memory_reserved_mib"] == 346.0 and first["memory_total_mib"] is None
    assert first["source_path"] == "dcgm/1795959281.prom" and first["source_line"] == 3
    assert gpus["ts"].n_unique() == 2


def test_cache_config_info_labels_become_config_rows_once(tmp_path: Path) -> None:
    info = (
        'vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="68",'
        'sliding_window="None",cache_dtype="auto"} 1.0\n'
    )
    for ts in (1795959281, 1795959282, 1795959283):
        write(tmp_path, f"metrics/{ts}.prom", "# TYPE vllm:cache_config_info gauge\n" + info)
    config = ingest(tmp_path).table("config")
    assert dict(zip(config["key"], config["value"], strict=True)) == {
        "block_size": "128",
        "engine": "0",
        "num_gpu_blocks": "68",
        "sliding_window": "None",
        "cache_dtype": "auto",
    }
    assert set(config["source_path"]) == {"metrics/1795959281.prom"}
    assert set(config["origin"]) == {"metrics"} and set(config["engine"]) == {"vllm"}


def _realdata_metric_folders() -> list[Path]:
    runs = REALDATA / "vllm-cpu"
    return sorted(runs.glob("*/metrics")) if runs.is_dir() else []


@pytest.mark.shared
@pytest.mark.parametrize(
    "name",
    [
        "sglang-metrics-early-1.prom",
        "vllm-v0-metrics-help-only-2.prom",
        "vllm-v1-metrics-0.10-engine-label-3.prom",
        "vllm-v1-metrics-0.7-1.prom",
    ],
)
def test_every_issue_paste_parses_fully(tmp_path: Path, name: str) -> None:
    src = shared("realdata", "issues", name)
    write(tmp_path, name, src.read_bytes())
    got = ingest(tmp_path)
    acct = got.account(name)
    assert got.kinds[name] == "prom_text"
    assert acct.lines_total == len(src.read_bytes().splitlines())
    assert acct.lines_unmatched == 0 and acct.balanced()
    lines = src.read_text().splitlines()
    samples = [line for line in lines if line.strip() and not line.startswith("#")]
    assert got.table("scrapes")["samples"].sum() == len(samples)


@pytest.mark.shared
@pytest.mark.parametrize("folder", _realdata_metric_folders(), ids=lambda p: p.parent.name)
def test_every_real_run_parses_every_line(folder: Path) -> None:
    got = ingest(folder)
    proms = sorted(folder.glob("*.prom"))
    if proms:
        acct = got.account_of("prom_text")
        total = sum(len(p.read_bytes().splitlines()) for p in proms)
        assert (acct.lines_total, acct.lines_parsed) == (total, total)
        sample_lines = sum(
            1
            for p in proms
            for line in p.read_text().splitlines()
            if line and not line.startswith("#")
        )
        body = got.table("scrapes").filter(pl.col("origin") == "body")
        assert body.height == len(proms) and body["samples"].sum() == sample_lines
    log = got.account_of("scrape_log")
    assert log.lines_unmatched == 0
    assert log.records == len((folder / "scrapes.jsonl").read_text().splitlines())


def test_a_label_quoting_a_server_command_keeps_a_scrape_a_scrape() -> None:
    # No `# TYPE` line (the scrape's own score is 70) and a label quoting `vllm serve` (the
    # launch-flags sniffer scores a server command 75): the sample line is not a command.
    head = 'vllm:num_requests_waiting{model_name="m",cmd="nohup vllm serve m"} 3\n'
    ingester, _ = classify_file("metrics.prom", head.encode())
    assert ingester is not None and ingester.kind == "prom_text"
    command, _ = classify_file("run.sh", b"vllm serve m --max-model-len 4096\n")
    assert command is not None and command.kind == "launch_flags"
