"""vLLM v1's prompt tokens by source and sleep state, on real recorded scrapes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.conftest import FIXTURES, analyze_json

PREFIX = FIXTURES / "vllm-c2-prefill-peak-prefix" / "incident"
HEALTHY = FIXTURES / "vllm-a-healthy" / "incident"
_BY_SOURCE = re.compile(r'^vllm:prompt_tokens_by_source_total\{.*source="(\w+)"\} (\S+)$', re.M)


def _scrapes(incident: Path) -> list[Path]:
    return sorted((incident / "metrics").glob("*.prom"))


def _by_source(scrape: Path) -> dict[str, float]:
    return {s: float(v) for s, v in _BY_SOURCE.findall(scrape.read_text())}


def test_prefix_hits_give_the_computed_share_of_prompt_tokens() -> None:
    scrapes = _scrapes(PREFIX)
    first, last = _by_source(scrapes[0]), _by_source(scrapes[-1])
    grown = {s: last[s] - first[s] for s in last}
    assert grown["local_cache_hit"] > grown["local_compute"] > 0  # the recording's prefix
    _, doc = analyze_json(PREFIX)
    fact = doc["facts"]["prompt_tokens_computed_share"]
    assert fact["value"] == round(grown["local_compute"] / sum(grown.values()), 4)
    assert f"local_cache_hit {grown['local_cache_hit']:,.0f}" in fact["note"]


def test_a_server_that_computes_every_prompt_states_no_share() -> None:
    scrapes = _scrapes(HEALTHY)
    first, last = _by_source(scrapes[0]), _by_source(scrapes[-1])
    assert last["local_cache_hit"] == first["local_cache_hit"]
    assert last["external_kv_transfer"] == first["external_kv_transfer"]
    _, doc = analyze_json(HEALTHY)
    assert "prompt_tokens_computed_share" not in doc["facts"]
    assert "engine_slept" not in doc["facts"]  # awake throughout


def test_an_engine_put_to_sleep_is_stated_with_its_level(tmp_path: Path) -> None:
    incident = tmp_path / "incident"
    shutil.copytree(HEALTHY, incident)
    scrapes = _scrapes(incident)
    asleep = scrapes[len(scrapes) // 2 : len(scrapes) // 2 + 3]
    for scrape in asleep:  # /sleep?level=2 as vLLM exports it: awake 0, discard_all 1
        text = scrape.read_text()
        text = re.sub(r'(sleep_state="awake"\}) 1\.0', r"\1 0.0", text)
        text = re.sub(r'(sleep_state="discard_all"\}) 0\.0', r"\1 1.0", text)
        scrape.write_text(text)
    _, doc = analyze_json(incident)
    fact = doc["facts"]["engine_slept"]
    assert fact["value"] == 2
    assert fact["source"]["path"] == f"metrics/{asleep[0].name}"
    assert "asleep in 3 samples" in fact["note"]
