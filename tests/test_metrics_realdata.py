"""The real vLLM 0.32 runs: stored metric series against the raw scrape files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.metrics.scrape_time import scrape_time_from_name
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import FIXTURES, REALDATA
from tests.metric_support import ingest, raw_samples, same_value

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"
LOOKUP = load_aliases().lookup_map()


def _db(incident: Path, tmp: Path) -> duckdb.DuckDBPyConnection:
    db = tmp / "incident.duckdb"
    analyze(AnalyzeOptions(incident=incident, db=db, fail_on=None))
    return duckdb.connect(str(db), read_only=True)


@pytest.fixture(scope="module")
def saturation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    con = _db(SATURATION, tmp_path_factory.mktemp("b"))
    yield con
    con.close()


def _scalar(con: duckdb.DuckDBPyConnection, query: str) -> object:
    return con.sql(query).fetchall()[0][0]


def _rows(con: duckdb.DuckDBPyConnection, path: str) -> pl.DataFrame:
    return con.sql(
        "SELECT * FROM metric_samples WHERE source_path = ? ORDER BY source_line", params=[path]
    ).pl()


def test_saturation_run_is_two_hundred_timed_scrapes(saturation: duckdb.DuckDBPyConnection) -> None:
    usage = saturation.sql(
        "SELECT ts, source_path FROM metric_samples WHERE metric = 'kv_cache_usage' ORDER BY ts"
    ).pl()
    files = sorted((SATURATION / "metrics").glob("*.prom"))
    assert len(files) == 200 and usage.height == 200
    assert usage["ts"].to_list() == [scrape_time_from_name(f.name) for f in files]
    assert usage["source_path"].to_list() == [f"metrics/{f.name}" for f in files]


@pytest.mark.parametrize("index", [0, 1, 37, 63, 99, 100, 141, 177, 198, 199])
def test_stored_samples_equal_the_raw_scrape(
    saturation: duckdb.DuckDBPyConnection, index: int
) -> None:
    path = sorted((SATURATION / "metrics").glob("*.prom"))[index]
    raw = {k: v for k, v in raw_samples(path).items() if k[0] in LOOKUP}
    rows = _rows(saturation, f"metrics/{path.name}")
    assert rows.height == len(raw) > 100
    for row in rows.iter_rows(named=True):
        head = re.match(r"^([^{ ]+)(\{.*\})? ", row["raw"])
        assert head is not None
        line, value = raw[(head.group(1), head.group(2) or "")]
        assert row["source_line"] == line
        assert same_value(row["value"], value)
        assert row["ts"] == scrape_time_from_name(path.name)
        assert (row["metric"], row["suffix"]) == LOOKUP[row["name"]]


def test_histogram_buckets_keep_their_bounds(saturation: duckdb.DuckDBPyConnection) -> None:
    path = sorted((SATURATION / "metrics").glob("*.prom"))[-1]
    raw = raw_samples(path)
    rows = _rows(saturation, f"metrics/{path.name}").filter(
        (pl.col("metric") == "time_to_first_token") & (pl.col("suffix") == "bucket")
    )
    bounds = [
        float(re.search(r'le="([^"]+)"', labels).group(1).replace("+Inf", "inf"))  # type: ignore[union-attr]
        for name, labels in raw
        if name == "vllm:time_to_first_token_seconds_bucket"
    ]
    assert rows["le"].to_list() == bounds
    assert json.loads(rows["series"][0]) == {"engine": "0", "model_name": "/opt/tinymodel"}


def test_usage_is_counted_against_all_blocks_but_the_null_block(
    saturation: duckdb.DuckDBPyConnection,
) -> None:
    blocks = int(_scalar(saturation, "SELECT value FROM config WHERE key = 'num_gpu_blocks'"))
    usage = saturation.sql("SELECT value FROM metric_samples WHERE metric = 'kv_cache_usage'").pl()
    used = usage["value"] * (blocks - 1)  # every value is a whole number of blocks of 67
    assert (used - used.round(0)).abs().max() < 1e-9
    assert ((usage["value"] * blocks) - (usage["value"] * blocks).round(0)).abs().max() > 0.1
    assert used.max() == blocks - 1 and usage["value"].max() == 1.0


def test_preemptions_are_only_in_the_counter(saturation: duckdb.DuckDBPyConnection) -> None:
    last = _scalar(
        saturation,
        "SELECT arg_max(value, ts) FROM metric_samples WHERE metric = 'num_preemptions' "
        "AND suffix = 'total'",
    )
    assert last == 29
    lines, with_preemptions = saturation.sql(
        "SELECT count(*), count(preemptions) FROM log_stats"
    ).fetchall()[0]
    assert lines > 0 and with_preemptions == 0


def test_scrape_log_attempts_and_bodies(saturation: duckdb.DuckDBPyConnection) -> None:
    log = saturation.sql("SELECT * FROM scrapes WHERE origin = 'log' ORDER BY ts").pl()
    lines = (SATURATION / "metrics" / "scrapes.jsonl").read_text().splitlines()
    assert log.height == len(lines)
    failed = log.filter(pl.col("status") == "error")
    assert failed.height == sum('"error": "' in line for line in lines)
    assert failed["error"].str.contains("Connection refused").all()
    assert failed["ts"].max() < log.filter(pl.col("status") == "ok")["ts"].min()
    ok = log.filter(pl.col("status") == "ok")
    bodies = saturation.sql("SELECT file FROM scrapes WHERE origin = 'body'").pl()
    assert set(ok["file"]) == set(bodies["file"])
    assert (ok["http_status"] == 200).all() and (ok["duration_s"] > 0).all()


def test_startup_refusal_log_is_dated_by_the_scrape_log() -> None:
    incident = FIXTURES / "vllm-e-startup-refusal" / "incident"
    found = discover(incident)
    first = json.loads((incident / "metrics" / "scrapes.jsonl").read_text().splitlines()[0])
    assert found.anchor == datetime.fromtimestamp(first["ts"], tz=UTC).replace(tzinfo=None)
    assert found.anchor_source == "times in metrics/scrapes.jsonl"


def _runs() -> list[Path]:
    """The fixture runs, plus any run in ../shared not copied into fixtures/."""
    runs = [p / "incident" for p in sorted(FIXTURES.glob("vllm-*"))]
    shared = REALDATA / "vllm-cpu"
    if shared.is_dir():
        runs += [
            p
            for p in sorted(shared.iterdir())
            if (p / "server.log").exists() and not (FIXTURES / f"vllm-{p.name}").exists()
        ]
    return runs


@pytest.mark.parametrize(
    "incident", _runs(), ids=lambda p: p.parent.name if p.name == "incident" else p.name
)
def test_pool_tokens_from_metrics_agree_with_the_log(incident: Path) -> None:
    got = ingest(incident)
    config = got.table("config")
    metrics = (
        dict(config.filter(pl.col("origin") == "metrics").select("key", "value").iter_rows())
        if config.height
        else {}
    )
    pool = got.table("log_kv_pool")
    log_tokens = set(pool["tokens"].drop_nulls()) if "tokens" in pool.columns else set()
    if not metrics:
        # The server never served (a startup refusal), so nothing was scraped. The log may
        # still print the pool it sized before a later check refused the start (e2).
        # Every log or pasted ticket, its lines joined: a terminal may have wrapped the pool
        # line (`... CPU KV cache size: 524` / `,288 tokens, ...`).
        logs = [p for p in incident.rglob("*") if p.is_file() and p.suffix in (".log", ".md")]
        log = "".join(p.read_text(errors="replace").replace("\n", "") for p in logs)
        printed = {
            int(n.replace(",", "")) for n in re.findall(r"KV cache size: ([\d,]+) tokens", log)
        }
        assert log_tokens == printed
        pytest.skip(f"{incident}: no cache_config_info scraped (no scrapes, or never served)")
    blocks, block_size = int(metrics["num_gpu_blocks"]), int(metrics["block_size"])
    assert log_tokens == {blocks * block_size}
    if "kv_cache_size_tokens" in metrics:  # a label of cache_config_info from 0.2x, not 0.10
        assert log_tokens == {int(metrics["kv_cache_size_tokens"])}
