"""The alias table: every sample line resolves to its metric; the issue's names are covered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvdiag.analyzer.schema.aliases import load_aliases, parse_aliases
from kvdiag.domain.errors import FormatPackError
from tests.metric_support import ingest, write

TABLE = load_aliases()
SAMPLES = [
    pytest.param(m.canonical, line, id=f"{m.canonical}:{i}")
    for m in TABLE.metrics
    for i, line in enumerate(m.samples)
]


@pytest.mark.parametrize(("canonical", "line"), SAMPLES)
def test_sample_line_resolves_to_its_metric(tmp_path: Path, canonical: str, line: str) -> None:
    write(tmp_path, "m.prom", f"# TYPE x gauge\n{line}\n")
    rows = ingest(tmp_path).table("metric_samples")
    assert rows["metric"].to_list() == [canonical]
    exposed = re.split(r"[{ ]", line)[0]
    for old, new in TABLE.prefix_rewrites:
        if exposed.startswith(old):
            exposed = new + exposed[len(old) :]
    family = max((f for f in TABLE.get(canonical).names if exposed.startswith(f)), key=len)
    assert rows["suffix"].to_list() == [exposed[len(family) :].lstrip("_")]


def test_every_metric_has_a_sample_for_each_engine_prefix() -> None:
    for m in TABLE.metrics:
        # an engine's `name:` prefix, dcgm-exporter's, Dynamo's, others' `name_` (issue 32)
        engine = r"^([a-z]+:|DCGM_|dynamo_[a-z]+_|[a-z]+_)"
        prefixes = {re.match(engine, n).group(1) for n in m.names}  # type: ignore[union-attr]
        sampled = {
            p for p in prefixes if any(s.removeprefix("ray_").startswith(p) for s in m.samples)
        }
        assert sampled == prefixes, (m.canonical, prefixes - sampled)


# Every name issue 4 lists, and the SGLang and dcgm families it refers to.
ISSUE_NAMES = {
    "kv_cache_usage": [
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "sglang:token_usage",
    ],
    "num_requests_swapped": ["vllm:num_requests_swapped"],
    "prefix_cache_queries": ["vllm:gpu_prefix_cache_queries", "vllm:prefix_cache_queries"],
    "prefix_cache_hits": ["vllm:gpu_prefix_cache_hits", "vllm:prefix_cache_hits"],
    "prefix_cache_hit_rate": ["vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"],
    "inter_token_latency": [
        "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
    ],
    "num_requests_waiting_by_reason": ["vllm:num_requests_waiting_by_reason"],
    "admission_rejections": ["vllm:admission_rejections"],
    "request_num_preemptions": ["vllm:request_num_preemptions"],
    "num_preemptions": ["vllm:num_preemptions"],
    "prompt_tokens": ["vllm:prompt_tokens", "sglang:prompt_tokens"],
    "generation_tokens": ["vllm:generation_tokens", "sglang:generation_tokens"],
    "request_success": ["vllm:request_success"],
    "e2e_request_latency": [
        "vllm:e2e_request_latency_seconds",
        "sglang:e2e_request_latency_seconds",
    ],
    "request_prefill_time": ["vllm:request_prefill_time_seconds"],
    "request_decode_time": ["vllm:request_decode_time_seconds"],
    "request_queue_time": ["vllm:request_queue_time_seconds", "sglang:queue_time_seconds"],
    "time_to_first_token": [
        "vllm:time_to_first_token_seconds",
        "sglang:time_to_first_token_seconds",
    ],
    "num_requests_running": ["vllm:num_requests_running", "sglang:num_running_reqs"],
    "num_requests_waiting": ["vllm:num_requests_waiting", "sglang:num_queue_reqs"],
    "kv_pool_tokens": ["sglang:max_total_num_tokens"],
    "kv_used_tokens": ["sglang:kv_used_tokens"],
    "kv_available_tokens": ["sglang:kv_available_tokens"],
    "kv_evictable_tokens": ["sglang:kv_evictable_tokens"],
    "gen_throughput": ["sglang:gen_throughput"],
    "retracted_requests": ["sglang:num_retracted_reqs"],
    "gpu_fb_used": ["DCGM_FI_DEV_FB_USED"],
    "gpu_fb_free": ["DCGM_FI_DEV_FB_FREE"],
    "gpu_fb_total": ["DCGM_FI_DEV_FB_TOTAL"],
    "gpu_fb_reserved": ["DCGM_FI_DEV_FB_RESERVED"],
    "cache_config_info": ["vllm:cache_config_info"],
}


@pytest.mark.parametrize(("canonical", "names"), ISSUE_NAMES.items(), ids=list(ISSUE_NAMES))
def test_issue_names_are_aliased(canonical: str, names: list[str]) -> None:
    assert set(names) <= set(TABLE.get(canonical).names)


def test_prefilter_accepts_every_exposed_name() -> None:
    pattern = re.compile(TABLE.line_prefilter())
    for name in TABLE.lookup_map():
        assert pattern.match(f"{name} 1"), name
        assert pattern.match(f'{name}{{a="b"}} 1'), name
    assert pattern.match("ray_vllm:num_requests_running 1")
    assert not pattern.match("python_gc_objects_collected_total 1")
    assert not pattern.match("vllm:num_requests_running_x 1")


_HEAD = 'schema = 1\nunit_ranges = { "" = [-inf, inf], u = [0.0, 1.0] }\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("schema = 2", "unsupported schema"),
        (_HEAD + "bogus = 1", "unknown key(s) ['bogus']"),
        (_HEAD + "[metric.a]\nnames=['x']\ntype='gauge'\nunit='u'\nextra=1", "unknown key(s)"),
        (_HEAD + "[metric.a]\nnames=['x']\ntype='rate'", "type must be one of"),
        (
            _HEAD + "[metric.a]\nnames=['x']\ntype='gauge'\n[metric.b]\nnames=['x']\ntype='gauge'",
            "listed under both a and b",
        ),
        (
            _HEAD + "[metric.a]\nnames=['x']\ntype='gauge'\nunit='MiB'",
            "unit 'MiB' has no unit_ranges",
        ),
        (_HEAD + "[metric.a]\nnames=['x']\ntype='gauge'\nrange=[1, 0]", "low <= high"),
    ],
    ids=[
        "schema",
        "unknown-key",
        "unknown-metric-key",
        "bad-type",
        "duplicate-name",
        "unit-without-range",
        "inverted-range",
    ],
)
def test_loader_rejects_bad_tables(text: str, message: str) -> None:
    with pytest.raises(FormatPackError, match=re.escape(message)):
        parse_aliases(text, "test.toml")
