"""SGLang through the reconciliation: its facts, its vocabulary in every finding, mixed folders."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.live.promql import exposed_names
from kvdiag.analyzer.model.effective import EngineContext, default_value
from kvdiag.analyzer.schema.aliases import load_aliases
from tests.conftest import FIXTURES, analyze_json, shared

SGLANG_FIXTURES = sorted(
    p.name for p in FIXTURES.glob("sglang-*") if p.name != "sglang-vs-vllm-pools"
)
# What only vLLM says: an SGLang incident must not be told any of it.
VLLM_WORDS = (
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--block-size",
    "--enable-prefix-caching",
    "--kv-cache-memory-bytes",
    "--enforce-eager",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "preempt",
)


def _facts(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    fact = doc["facts"][name]
    return fact if isinstance(fact, list) else [fact]


def _said(doc: dict[str, Any]) -> list[str]:
    """Everything the diagnosis tells the reader in words (facts' canonical names aside)."""
    texts = [doc["verdict"]["summary"]] + [r["reason"] for r in doc["verdict"]["ruled_out"]]
    texts += [m["what"] + " " + m["would_decide"] for m in doc["missing_evidence"]]
    for f in doc["findings"]:
        texts.append(f["title"])
        texts += [r["action"] + " " + r["rationale"] for r in f["remediation"]]
    for layer in doc["reconciliation"]:
        texts.append(layer["conclusion"])
        texts += [f"{c['quantity']} {c['unit']} {c['note']}" for c in layer["comparisons"]]
    return texts


@pytest.mark.parametrize("name", SGLANG_FIXTURES)
def test_sglang_incidents_are_told_in_sglangs_words(name: str) -> None:
    _, doc = analyze_json(FIXTURES / name / "incident")
    assert _facts(doc, "engine")[0]["value"] == "sglang"
    for text in _said(doc):
        wrong = [w for w in VLLM_WORDS if w in text]
        assert not wrong, (wrong, text)


def test_the_saturation_remedies_use_sglang_flags() -> None:
    _, doc = analyze_json(FIXTURES / "sglang-saturation-retract" / "incident")
    (finding,) = doc["findings"]
    actions = [r["action"] for r in finding["remediation"]]
    assert any(a.startswith("--max-running-requests ") for a in actions), actions
    assert any("--kv-cache-dtype fp8_e4m3" in a for a in actions), actions
    assert any("--mem-fraction-static" in a for a in actions), actions
    assert "1 retraction" in finding["title"]
    layer3 = next(la for la in doc["reconciliation"] if la["layer"] == 3)
    assert any(c["quantity"] == "retractions" for c in layer3["comparisons"])


def test_retractions_count_once_however_many_ranks_print_them(tmp_path: Path) -> None:
    """Fragment 10 shows two retraction events over 11 rank lines; fragment 11 one over 5."""
    for name, events, lines in (
        ("sglang-decode-oom-retract-multi-tp-10.log", 2, 11),
        ("sglang-usage-full-then-retract-11.log", 1, 5),
    ):
        src = shared("realdata", "issues", name)
        text = src.read_text().splitlines()
        printed = [ln for ln in text if "#retracted_reqs" in ln]
        distinct = {re.sub(r" TP\d+\]", "]", ln) for ln in printed}
        assert (len(distinct), len(printed)) == (events, lines)
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(src, folder / name)
        _, doc = analyze_json(folder)
        (fact,) = _facts(doc, "preemptions")
        assert fact["value"] == events, fact
        assert f"printed {lines} times across TP ranks" in fact["note"]


def test_mem_fraction_static_plays_gpu_memory_utilization() -> None:
    _, doc = analyze_json(FIXTURES / "sglang-admission-limited" / "incident")
    (fact,) = _facts(doc, "gpu_memory_utilization")
    assert (fact["value"], fact["note"]) == (0.826, "stated as mem_fraction_static")
    layer1 = next(la for la in doc["reconciliation"] if la["layer"] == 1)
    quantities = [c["quantity"] for c in layer1["comparisons"]]
    assert "ledger: kept outside mem_fraction_static 0.826" in quantities
    assert "memory outside mem_fraction_static" in quantities


def test_sglang_defaults_are_found_under_sglangs_own_names() -> None:
    ctx = EngineContext(engine="sglang", version="0.3.6", tp=8)
    found = default_value("gpu_memory_utilization", ctx)
    assert found is not None and found.value == "0.83"
    assert found.source == "default for SGLang 0.3.6"
    block = default_value("block_size", EngineContext(engine="sglang"))
    assert block is not None and block.value == "1"


def test_a_folder_of_both_engines_puts_their_pools_side_by_side() -> None:
    incident = FIXTURES / "sglang-vs-vllm-pools" / "incident"
    vllm_tokens = int(
        re.search(r"([\d,]+) tokens", (incident / "vllm.log").read_text())[1].replace(",", "")
    )  # type: ignore[index]
    sglang_tokens = int(re.search(r"#tokens: (\d+)", (incident / "sglang.log").read_text())[1])  # type: ignore[index]
    _, doc = analyze_json(incident)
    engines = {f["value"]: f for f in _facts(doc, "engine")}
    assert set(engines) == {"vllm", "sglang"}
    assert engines["sglang"]["scope"] == [["engine", "sglang"]]
    pools = {dict(f["scope"])["engine"]: f["value"] for f in _facts(doc, "pool_tokens")}
    assert pools == {"vllm": vllm_tokens, "sglang": sglang_tokens}
    # No engine's defaults are put on a folder that cannot say which engine a setting is of.
    assert not any(
        "default for" in str(f.get("note")) for k in doc["facts"] for f in _facts(doc, k)
    )
    layer1 = next(la for la in doc["reconciliation"] if la["layer"] == 1)
    rows = {c["quantity"]: c["observed"] for c in layer1["comparisons"]}
    assert rows["SGLang KV pool size"] == sglang_tokens
    assert rows["vLLM KV pool size"] == vllm_tokens
    assert rows["vLLM KV pool memory per GPU"] == 8.11


def test_the_first_sglang_metrics_give_pool_caps_and_context(tmp_path: Path) -> None:
    src = shared("realdata", "issues", "sglang-metrics-early-1.prom")
    text = src.read_text()

    def gauge(name: str) -> int:
        return int(float(re.search(rf"^sglang:{name}\{{[^}}]*\}} ([\d.]+)$", text, re.M)[1]))  # type: ignore[index]

    shutil.copy(src, tmp_path / src.name)
    _, doc = analyze_json(tmp_path)
    assert _facts(doc, "engine")[0]["value"] == "sglang"
    assert _facts(doc, "pool_tokens")[0]["value"] == gauge("max_total_num_tokens")
    (seqs,) = _facts(doc, "max_num_seqs")
    assert (seqs["value"], seqs["note"]) == (
        gauge("max_running_requests"),
        "stated as max_running_requests",
    )
    assert _facts(doc, "max_model_len")[0]["value"] == gauge("context_len")
    # The pool gauge states the pool: no "no pool size" among what the folder lacks.
    assert not [m for m in doc["missing_evidence"] if "pool size" in m["what"]]


def test_layer_2_adds_the_evictable_radix_cache_back(tmp_path: Path) -> None:
    used, available, evictable = 30000, 10000, 60000
    labels = '{model_name="m",tp_rank="0"}'
    (tmp_path / "metrics.prom").write_text(
        f"sglang:token_usage{labels} {used / (used + available + evictable):.2f}\n"
        f"sglang:num_running_reqs{labels} 12\n"
        f"sglang:num_queue_reqs{labels} 0\n"
        f"sglang:kv_used_tokens{labels} {used}\n"
        f"sglang:kv_available_tokens{labels} {available}\n"
        f"sglang:kv_evictable_tokens{labels} {evictable}\n"
    )
    _, doc = analyze_json(tmp_path)
    layer2 = next(la for la in doc["reconciliation"] if la["layer"] == 2)
    (row,) = [c for c in layer2["comparisons"] if "evictable" in c["quantity"]]
    assert (row["expected"], row["observed"]) == (0.3, 0.9)
    assert "60,000 evictable radix-cache tokens" in row["note"]


def test_an_empty_pool_at_start_up_is_refused_in_sglangs_words(tmp_path: Path) -> None:
    (line,) = [
        s.line
        for e in load_pack("sglang_log").events
        if e.id == "not_enough_memory"
        for s in e.samples
        if "Current value" not in s.line
    ]
    (tmp_path / "sglang.log").write_text(line + "\n")
    _, doc = analyze_json(tmp_path)
    (finding,) = doc["findings"]
    assert finding["code"] == "KV101"
    assert finding["remediation"][0]["action"].startswith("raise --mem-fraction-static")


def test_the_live_source_fetches_what_sglangs_facts_read() -> None:
    """`analyze --prometheus` asks for SGLang's pool, caps and radix-cache gauges, the series
    the folder analysis above reads its pool, max_running_requests and layer 2 from."""
    fetched = set(exposed_names(load_aliases()))
    text = shared("realdata", "issues", "sglang-metrics-early-1.prom").read_text()
    for gauge in ("max_total_num_tokens", "max_running_requests", "context_len"):
        assert re.search(rf"^sglang:{gauge}\{{", text, re.M), gauge
        assert f"sglang:{gauge}" in fetched, gauge
    radix = {"sglang:kv_used_tokens", "sglang:kv_available_tokens", "sglang:kv_evictable_tokens"}
    assert radix <= fetched, radix - fetched
