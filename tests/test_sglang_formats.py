"""Every sample of the SGLang pack parses as declared, through the same checks as the vLLM pack.

The checks are tests/test_formats.py's, run here over formats/sglang_log.toml (that module
parametrises over its PACKS; this one adds the SGLang pack without editing it).
"""

from __future__ import annotations

import pytest

from kvdiag.analyzer.ingest.logs.format_pack import Event, load_pack
from kvdiag.analyzer.ingest.logs.parse import parsed_expr
from kvdiag.analyzer.ingest.logs.steps import lines_frame, parse_batch
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.cli.format_coverage import PACKS
from tests import test_formats as checks
from tests.conftest import run_cli

PACK = "sglang_log"
_pack = load_pack(PACK)


@pytest.mark.parametrize(
    ("event", "index"),
    [(e, i) for e in _pack.events for i in range(len(e.samples))],
    ids=[f"{e.id}:{i}" for e in _pack.events for i in range(len(e.samples))],
)
def test_event_sample(event: Event, index: int) -> None:
    checks.test_event_sample_matches_its_variant_and_yields_its_fields(PACK, event, index)
    if event.samples[index].config:
        checks.test_event_sample_yields_its_config_rows(PACK, event, index)


@pytest.mark.parametrize(
    ("step_id", "index"),
    [(s.id, i) for s in _pack.envelope for i in range(len(s.samples))],
    ids=[f"{s.id}:{i}" for s in _pack.envelope for i in range(len(s.samples))],
)
def test_envelope_sample(step_id: str, index: int) -> None:
    checks.test_envelope_sample_yields_its_fields(PACK, step_id, index)


@pytest.mark.parametrize(
    ("record_id", "index"),
    [(r.id, i) for r in _pack.records for i in range(len(r.samples))],
    ids=[f"{r.id}:{i}" for r in _pack.records for i in range(len(r.samples))],
)
def test_record_sample(record_id: str, index: int) -> None:
    checks.test_record_sample_is_that_record(PACK, record_id, index)


def test_all_samples_parse_together_in_one_batch() -> None:
    checks.test_all_samples_parse_together_in_one_batch(PACK)


def test_every_envelope_sample_line_is_parsed() -> None:
    """Envelope samples are whole real lines: each must also be understood as a whole."""
    for step in _pack.envelope:
        for sample in step.samples:
            parsed = parse_batch(lines_frame([sample.line]), _pack)
            assert parsed.frame.select(parsed_expr()).item(), (step.id, sample.line)


def test_sample_sources_name_where_they_came_from() -> None:
    samples = [s for e in _pack.events for s in e.samples]
    samples += [s for r in _pack.records for s in r.samples]
    samples += [s for st in _pack.envelope for s in st.samples]
    for s in samples:
        real = s.source.startswith(("issues/", "vllm-cpu/", "../shared/", "fixtures/"))
        assert real or s.source.startswith("constructed"), s.source


def test_a_changed_batch_line_is_a_near_miss_not_silence() -> None:
    line = "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, tokens used: many"
    parsed = parse_batch(lines_frame([line]), _pack)
    assert parsed.frame["near_miss"].to_list() == [True]
    assert not parsed.frame.select(parsed_expr()).item()


def test_formats_list_shows_every_bundled_pack() -> None:
    listed = run_cli("formats", "--list").stdout
    assert listed.startswith("vllm_log: vLLM server logs")
    assert len(PACKS) >= 3  # vLLM, SGLang, TGI at least: the registry, not a copy of it
    for name in PACKS:
        pack = load_pack(name)
        assert f"\n{pack.name}: " in "\n" + listed
        for event in pack.events:
            assert f"  event    {event.id} -> {event.table} " in listed
    aliases = load_aliases()
    assert f"resolved to {len(aliases.metrics)} canonical metrics" in listed
    for metric in aliases.metrics:
        names = ", ".join(metric.names)
        assert f"  metric   {metric.canonical} ({metric.type}) <- {names}" in listed
    assert "  family   sglang: " in listed and "  family   vllm: " in listed
