"""The TGI log ingester: the real launcher fragment of ../shared/realdata/issues (recognised,
every line accounted, its settings read back against the text), the pack's samples through
the checks tests/test_formats.py runs on every pack, and sniffing that leaves vLLM and SGLang
logs to their own ingesters."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import classify_file
from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.config.cmdline import command_settings, words
from kvdiag.analyzer.ingest.logs.format_pack import Event, load_pack
from kvdiag.analyzer.ingest.logs.tgi import TgiLogIngester, parse_args
from kvdiag.analyzer.text.lines import read_head
from tests import test_formats
from tests.conftest import FIXTURES, REALDATA, analyze_json, shared

PACK = load_pack("tgi_log")
FRAGMENT = "tgi-launcher-args-1.log"
Tables = dict[str, pl.DataFrame]


def ingest(path: Path) -> tuple[Tables, Account]:
    """One file through the TGI ingester: tables (concatenated) and its account."""
    unit = InputUnit("tgi_log", path.name, (path,), (path.name,), path.stat().st_size, "r")
    frames: dict[str, list[pl.DataFrame]] = defaultdict(list)
    accounts = []
    for emit in TgiLogIngester().ingest(unit, IngestContext(path.parent, None, None, None)):
        if isinstance(emit, TableBatch):
            frames[emit.table].append(emit.frame)
        elif isinstance(emit, Account):
            accounts.append(emit)
    (account,) = accounts
    return {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in frames.items()}, account


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tgi.log"
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the real fragment


def test_the_fragment_is_recognised_and_every_line_accounted() -> None:
    path = shared("realdata", "issues", FRAGMENT)
    ingester, why = classify_file(path.name, read_head(path))
    assert ingester is TgiLogIngester, why
    _, account = ingest(path)
    assert account.lines_total == len(path.read_text().splitlines()) == 4
    assert account.lines_parsed == 4 and account.lines_unmatched == 0
    assert "TGI's own UTC timestamp" in " ".join(account.notes)


def test_every_field_of_the_args_is_a_config_row_with_the_value_printed() -> None:
    path = shared("realdata", "issues", FRAGMENT)
    tables, _ = ingest(path)
    config = tables["config"]
    assert set(config["engine"]) == {"tgi"} and set(config["origin"]) == {"log"}
    got = dict(zip(config["key"], config["value"], strict=True))
    text = path.read_text().splitlines()[0]
    # Read independently of the pack: each `name: value` of the struct, Some(...) unwrapped.
    field = r'(\w+): (?:Some\()?"?([^",()]*?)"?\)?(?=, \w+: | \}$)'
    printed = dict(re.findall(field, text.split("Args { ")[1]))
    assert len(printed) == text.count(": ") - 1  # every field (the header's target aside)
    for name, value in printed.items():
        if name in ("dtype", "quantize") and value == "None":
            continue  # unstated: the engine's default applies
        assert got[name] == value, name
    assert got["num_shard"] == "4" and got["max_total_tokens"] == "8192"
    assert got["max_batch_total_tokens"] == "16000" and got["max_concurrent_requests"] == "128"
    # TGI's names only: its settings table reads them as kvdiag's keys (facts, rules)
    assert "tensor_parallel_size" not in got and "max_model_len" not in got


def test_a_bare_max_batch_total_tokens_is_the_pool_in_tokens() -> None:
    tables, _ = ingest(shared("realdata", "issues", FRAGMENT))
    pool = tables["log_kv_pool"]
    assert pool.select("tokens", "max_model_len", "source_line").rows() == [(16000, 8192, 1)]
    engine = tables["log_engine"]
    assert engine["event"].to_list() == ["tgi_launcher_args", "tgi_sharding"]
    assert engine["engine"].to_list() == ["tgi", "tgi"]
    assert '"max_batch_total_tokens": "16000"' in engine["args"][0]


def test_an_optional_max_batch_total_tokens_is_a_request_not_the_pool(tmp_path: Path) -> None:
    line = (
        '2024-01-17T19:54:02.802403Z  INFO text_generation_launcher: Args { model_id: "m", '
        "num_shard: None, max_total_tokens: 2048, max_batch_total_tokens: Some(16000), env: false }"
    )
    tables, account = ingest(_write(tmp_path, line + "\n"))
    assert "log_kv_pool" not in tables
    got = dict(zip(tables["config"]["key"], tables["config"]["value"], strict=True))
    assert got["max_batch_total_tokens"] == "16000" and "num_shard" not in got
    assert account.lines_parsed == 1


def test_the_routers_sizing_and_refusals_fill_their_tables(tmp_path: Path) -> None:
    sizing = load_pack("tgi_log")
    lines = [s.line for e in sizing.events if e.table != "log_engine" for s in e.samples]
    tables, account = ingest(_write(tmp_path, "\n".join(lines) + "\n"))
    assert account.lines_unmatched == 0
    pool = tables["log_kv_pool"]
    assert sorted(pool["tokens"].drop_nulls()) == [30816, 30816, 72448, 72448]
    assert pool.drop_nulls("blocks").select("blocks", "block_size").rows() == [(52719, 1)] * 2
    assert tables["log_http"]["status"].to_list() == [429]
    refusals = tables["log_capacity_errors"]
    above = refusals.filter(pl.col("event") == "tgi_max_total_above_budget")
    assert above.select("max_model_len", "pool_tokens").rows() == [(8192, 6000)]


# ---------------------------------------------------------------- JSON and the struct reader


def test_a_json_escaped_args_body_reads_as_the_plain_one() -> None:
    plain = 'model_id: "a/b", num_shard: Some(2), cors_allow_origin: [], hub: Some("/data")'
    escaped = plain.replace('"', '\\"')
    want = {"model_id": "a/b", "num_shard": "2", "cors_allow_origin": "[]", "hub": "/data"}
    assert parse_args(plain) == want
    assert parse_args(escaped) == want


def test_commas_inside_strings_and_brackets_do_not_split_fields() -> None:
    got = parse_args('a: "x, y", b: [1, 2], c: Some(Linear), d: "q\\"uote"')
    assert got == {"a": "x, y", "b": "[1, 2]", "c": "Linear", "d": 'q"uote'}


# ---------------------------------------------------------------- the pack's own samples

EVENTS = [
    pytest.param("tgi_log", e, i, id=f"{e.id}:{i}")
    for e in PACK.events
    for i in range(len(e.samples))
]
CONFIGS = [
    pytest.param("tgi_log", e, i, id=f"{e.id}:{i}")
    for e in PACK.events
    for i, s in enumerate(e.samples)
    if s.config
]
ENVELOPES = [
    pytest.param("tgi_log", st.id, i, id=f"{st.id}:{i}")
    for st in PACK.envelope
    for i in range(len(st.samples))
]
RECORDS = [
    pytest.param("tgi_log", r.id, i, id=f"{r.id}:{i}")
    for r in PACK.records
    for i in range(len(r.samples))
]


@pytest.mark.parametrize(("pack_name", "event", "index"), EVENTS)
def test_event_sample(pack_name: str, event: Event, index: int) -> None:
    test_formats.test_event_sample_matches_its_variant_and_yields_its_fields(
        pack_name, event, index
    )


@pytest.mark.parametrize(("pack_name", "event", "index"), CONFIGS)
def test_config_sample(pack_name: str, event: Event, index: int) -> None:
    test_formats.test_event_sample_yields_its_config_rows(pack_name, event, index)


@pytest.mark.parametrize(("pack_name", "step_id", "index"), ENVELOPES)
def test_envelope_sample(pack_name: str, step_id: str, index: int) -> None:
    test_formats.test_envelope_sample_yields_its_fields(pack_name, step_id, index)


@pytest.mark.parametrize(("pack_name", "record_id", "index"), RECORDS)
def test_record_sample(pack_name: str, record_id: str, index: int) -> None:
    test_formats.test_record_sample_is_that_record(pack_name, record_id, index)


def test_all_samples_parse_together_and_name_their_source() -> None:
    test_formats.test_all_samples_parse_together_in_one_batch("tgi_log")
    for s in [s for part in (*PACK.events, *PACK.records, *PACK.envelope) for s in part.samples]:
        assert s.source.startswith(("issues/", "constructed", "fixtures/tgi-")), s.source
        if s.source.startswith("fixtures/"):  # real text kept as a fixture: the line is there
            where, _, _ = s.source.partition(" ")
            text = (FIXTURES / where.split(":")[0].removeprefix("fixtures/")).read_text()
            last_line = s.line.splitlines()[-1].strip()
            assert last_line in text, s.source


# ---------------------------------------------------------------- sniffing


def _other_engines_logs() -> list[Path]:
    found = sorted(REALDATA.glob("issues/*.log")) if REALDATA.exists() else []
    found = [p for p in found if not p.name.startswith("tgi-")]
    ours = [p for p in sorted(FIXTURES.glob("*/incident/**/*.log")) if "/tgi-" not in str(p)]
    return found + ours


@pytest.mark.parametrize("path", _other_engines_logs(), ids=lambda p: p.name)
def test_vllm_and_sglang_logs_are_not_taken_for_tgi(path: Path) -> None:
    head = read_head(path)
    assert TgiLogIngester.sniff(path.name, head.decode(errors="replace")) == 0
    ingester, _ = classify_file(path.name, head)
    assert ingester is not TgiLogIngester


def test_a_quoted_tgi_message_is_a_fragment_of_a_tgi_log() -> None:
    quoted = "Setting max batch total tokens to 30816"
    assert TgiLogIngester.quotes("ticket.md", f"we saw this:\n{quoted}\n")
    logged = f"2024-11-13T08:01:01.998811Z  INFO text_generation_router_v3: {quoted}\n"
    assert TgiLogIngester.sniff("tgi.log", logged) == 95
    assert not TgiLogIngester.quotes("tgi.log", logged)


# ---------------------------------------------------------------- findings in TGI's words


def test_a_kv_cache_below_one_request_is_unservable_in_tgis_words(tmp_path: Path) -> None:
    """The router's exit when warm-up left less KV than one max_total_tokens request (2.1+,
    printed in Rust's Debug form): KV101, naming TGI's max_total_tokens."""
    unfit = next(e for e in PACK.events if e.id == "max_total_tokens_unfit_exit")
    _write(tmp_path, unfit.samples[0].line + "\n")
    code, doc = analyze_json(tmp_path)
    assert (code, doc["verdict"]["primary"]) == (1, "unservable_config")
    (finding,) = [f for f in doc["findings"] if f["code"] == "KV101"]
    assert "one request of max_total_tokens 32,768" in finding["title"]
    assert "max_model_len" not in finding["title"]


def test_a_scrape_of_tgi_names_is_tgis_queue_and_batch(tmp_path: Path) -> None:
    """tgi_queue_size and tgi_batch_current_size are waiting and running requests, and a
    scrape of tgi_ names alone says the engine is TGI (so findings take TGI's words)."""
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "1751632569.prom").write_text(
        "# TYPE tgi_queue_size gauge\ntgi_queue_size 5\n"
        "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 8\n"
    )
    _, doc = analyze_json(tmp_path)
    facts = doc["facts"]
    assert facts["engine"]["value"] == "tgi"
    waiting, running = facts["max_requests_waiting"], facts["max_requests_running"]
    assert (waiting["value"], running["value"]) == (5, 8)


def test_tgi_commands_are_read_with_tgis_flags() -> None:
    """The launcher, and the docker image that runs it (the flags after the image are the
    launcher's): the docker command of fixtures/tgi-3-gemma3-startup's notes."""
    docker = (
        "sudo docker run --gpus all -v ~/models/gemma-3-27b-it:/models/gemma-3-27b-it -p 8080:80 "
        "ghcr.io/huggingface/text-generation-inference:latest --model-id /models/gemma-3-27b-it "
        "--trust-remote-code --num-shard 2"
    )
    found = command_settings(words([(1, docker)])) or []
    got = {s.key: s.value for s in found}
    assert {s.engine for s in found} == {"tgi"}
    assert got == {
        "model_id": "/models/gemma-3-27b-it",
        "trust_remote_code": "True",
        "num_shard": "2",
    }
    launcher = "text-generation-launcher --max-input-length 1024 --cuda-memory-fraction 0.8"
    got = {s.key: s.value for s in command_settings(words([(1, launcher)])) or []}
    assert got == {"max_input_tokens": "1024", "cuda_memory_fraction": "0.8"}


def test_a_429_without_the_cap_in_the_inputs_names_only_tgis_cap(tmp_path: Path) -> None:
    """The real 429 line of fixtures/tgi-overloaded-concurrency-cap without its launch
    record: the cap is not in the inputs, and the caps listed are TGI's, in its flag."""
    fixture = FIXTURES / "tgi-overloaded-concurrency-cap" / "incident" / "tgi.log"
    _write(tmp_path, fixture.read_text())
    _, doc = analyze_json(tmp_path)
    (finding,) = [f for f in doc["findings"] if f["code"] == "KV302"]
    assert "no queue cap in the inputs (--max-concurrent-requests)," in finding["title"]
    assert "max_num_queued" not in finding["title"]
