"""The TensorRT-LLM log ingester: a real trtllm-serve 1.1.0rc3 start-up (recognised, every line
accounted, the profiling pass kept apart from the server's pool), the pack's samples through the
checks tests/test_formats.py runs on every pack, sniffing that leaves the other engines' logs
alone, and trtllm-serve's flags read from a command."""

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
from kvdiag.analyzer.ingest.logs.trtllm import TrtllmLogIngester
from kvdiag.analyzer.model.quantities.vocabulary import vocabularies
from kvdiag.analyzer.text.lines import read_head
from tests import test_formats
from tests.conftest import FIXTURES, REALDATA

PACK = load_pack("trtllm_log")
SERVE_LOG = FIXTURES / "trtllm-window-cut-gpt-oss-120b" / "incident" / "trtllm-serve.log"
Tables = dict[str, pl.DataFrame]


def ingest(path: Path) -> tuple[Tables, Account]:
    """One file through the TensorRT-LLM ingester: tables (concatenated) and its account."""
    unit = InputUnit("trtllm_log", path.name, (path,), (path.name,), path.stat().st_size, "r")
    frames: dict[str, list[pl.DataFrame]] = defaultdict(list)
    accounts = []
    for emit in TrtllmLogIngester().ingest(unit, IngestContext(path.parent, None, None, None)):
        if isinstance(emit, TableBatch):
            frames[emit.table].append(emit.frame)
        elif isinstance(emit, Account):
            accounts.append(emit)
    (account,) = accounts
    return {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in frames.items()}, account


def _lines_with(text: str) -> list[int]:
    return [i for i, line in enumerate(SERVE_LOG.read_text().splitlines(), 1) if text in line]


# ---------------------------------------------------------------- the real start-up


def test_the_serve_log_is_recognised_and_every_line_accounted() -> None:
    ingester, why = classify_file(SERVE_LOG.name, read_head(SERVE_LOG))
    assert ingester is TrtllmLogIngester, why
    _, account = ingest(SERVE_LOG)
    assert account.lines_total == len(SERVE_LOG.read_text().splitlines())
    assert account.lines_parsed + account.lines_unmatched == account.lines_total
    assert account.lines_unmatched <= 5  # paths and print() lines of other code, shown as templates


def test_the_pool_is_the_one_after_the_estimate_not_the_profiling_cache() -> None:
    tables, _ = ingest(SERVE_LOG)
    (estimate,) = _lines_with("Estimated max memory in KV cache")
    allocated = _lines_with("for max tokens in paged KV cache")
    assert len(allocated) == 2 and allocated[0] < estimate < allocated[1]
    pool = tables["log_kv_pool"].filter(pl.col("tokens").is_not_null())
    assert pool.select("source_line", "tokens", "gib").rows() == [(allocated[1], 86720, 5.95)]
    profiling = tables["log_memory"].filter(pl.col("event") == "trtllm_profiling_pass")
    assert allocated[0] in profiling["source_line"].to_list()
    assert all(line < estimate for line in profiling["source_line"])


def test_the_cut_window_is_the_servers_and_the_settings_are_trtllms() -> None:
    tables, _ = ingest(SERVE_LOG)
    cut = tables["log_capacity_errors"]
    assert cut.select("event", "max_model_len", "estimated_max_len").rows() == [
        ("trtllm_window_reduced", 131072, 86720)
    ]
    config = tables["config"]
    assert set(config["engine"]) == {"trtllm"}
    got = dict(zip(config["key"], config["value"], strict=True))
    assert got["max_model_len"] == "86720"  # restated after the cut, the profiling value gone
    assert got["max_num_seqs"] == "64" and got["max_num_batched_tokens"] == "8192"
    assert got["block_size"] == "32"
    # "fraction is set 0.8999999761581421": the float32 the YAML's 0.9 was stored as
    assert got["free_gpu_memory_fraction"] == "0.9"


def test_the_python_loggers_stamp_times_the_line() -> None:
    tables, _ = ingest(SERVE_LOG)
    row = tables["log_capacity_errors"].row(0, named=True)
    assert str(row["ts"]) == "2025-12-20 04:21:51" and row["ts_raw"] == "12/20/2025-04:21:51"


def test_the_old_refusal_states_the_length_one_sequence_needs(tmp_path: Path) -> None:
    (event,) = [e for e in PACK.events if e.id == "pool_below_one_sequence"]
    path = tmp_path / "triton.log"
    path.write_text(event.samples[0].line + "\n")
    tables, _ = ingest(path)
    row = tables["log_capacity_errors"].row(0, named=True)
    needed = [int(n) for n in re.findall(r"\((\d+)\)", event.samples[0].line)[-2:]]
    assert (row["pool_tokens"], row["max_model_len"]) == (2560, needed[0] * needed[1])


# ---------------------------------------------------------------- the pack's own samples

EVENTS = [
    pytest.param("trtllm_log", e, i, id=f"{e.id}:{i}")
    for e in PACK.events
    for i in range(len(e.samples))
]
CONFIGS = [
    pytest.param("trtllm_log", e, i, id=f"{e.id}:{i}")
    for e in PACK.events
    for i, s in enumerate(e.samples)
    if s.config
]
ENVELOPES = [
    pytest.param("trtllm_log", st.id, i, id=f"{st.id}:{i}")
    for st in PACK.envelope
    for i in range(len(st.samples))
]
RECORDS = [
    pytest.param("trtllm_log", r.id, i, id=f"{r.id}:{i}")
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
    test_formats.test_all_samples_parse_together_in_one_batch("trtllm_log")
    for s in [s for part in (*PACK.events, *PACK.records, *PACK.envelope) for s in part.samples]:
        assert s.source.startswith(("paste: ", "constructed")), s.source


def test_the_real_samples_are_lines_of_the_serve_log() -> None:
    """Samples citing the DGX Spark paste are that log's lines (the fixture holds it)."""
    text = SERVE_LOG.read_text().splitlines()
    cited = [
        s.line
        for part in (*PACK.events, *PACK.records, *PACK.envelope)
        for s in part.samples
        if "stored file 2263047771" in s.source
    ]
    assert len(cited) >= 8 and all(line in text for line in cited)


# ---------------------------------------------------------------- sniffing


def _other_engines_logs() -> list[Path]:
    found = sorted(REALDATA.glob("issues/*.log")) if REALDATA.exists() else []
    fixtures = [p for p in sorted(FIXTURES.glob("*/incident/**/*.log")) if "trtllm" not in str(p)]
    return found + fixtures


@pytest.mark.parametrize("path", _other_engines_logs(), ids=lambda p: p.name)
def test_other_engines_logs_are_not_taken_for_trtllm(path: Path) -> None:
    head = read_head(path)
    assert TrtllmLogIngester.sniff(path.name, head.decode(errors="replace")) == 0
    ingester, _ = classify_file(path.name, head)
    assert ingester is not TrtllmLogIngester


def test_a_quoted_trtllm_message_is_a_fragment_of_a_trtllm_log() -> None:
    quoted = "[MemUsageChange] Allocated 16.05 GiB for max tokens in paged KV cache (263008)"
    assert TrtllmLogIngester.quotes("ticket.md", f"we saw this:\n{quoted}\n")
    logged = f"[TensorRT-LLM][INFO] {quoted}\n"
    assert TrtllmLogIngester.sniff("server.log", logged) == 95
    assert not TrtllmLogIngester.quotes("server.log", logged)


# ---------------------------------------------------------------- settings and words


def test_trtllm_serve_flags_set_trtllms_settings() -> None:
    command = (
        "trtllm-serve serve ./models/gemma3-27b --host 0.0.0.0 --port 8001 --max_batch_size 32 "
        "--tp_size 2 --kv_cache_free_gpu_memory_fraction 0.85 --extra_llm_api_options c.yaml"
    )
    found = {s.key: (s.value, s.engine) for s in command_settings(words([(1, command)])) or []}
    assert found["max_batch_size"] == ("32", "trtllm")
    assert found["tp_size"] == ("2", "trtllm")
    assert found["free_gpu_memory_fraction"] == ("0.85", "trtllm")
    assert found["model"] == ("./models/gemma3-27b", "trtllm")


def test_remedies_are_phrased_in_trtllms_flags() -> None:
    words_of = vocabularies()["trtllm"]
    assert words_of.flag("max_num_seqs", 32) == "--max_batch_size 32"
    assert words_of.flag("max_model_len") == "--max_seq_len"
    assert words_of.name("gpu_memory_utilization") == "free_gpu_memory_fraction"
    assert "--kv_cache_free_gpu_memory_fraction" in words_of.phrase("grow_pool")
    assert words_of.explicit_pool.flag == "kv_cache_config.max_tokens"


def test_the_year_note_says_the_stamps_carry_their_own() -> None:
    _, account = ingest(SERVE_LOG)
    assert "TensorRT-LLM's own stamps" in " ".join(account.notes)
    assert not any(n.startswith("year ") for n in account.notes)
