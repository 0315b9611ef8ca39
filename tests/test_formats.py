"""Every sample line of every format pack parses as declared, through the real code path."""

from __future__ import annotations

import re

import polars as pl
import pytest

from kvdiag.analyzer.errors import FormatPackError
from kvdiag.analyzer.ingest.formats import Event, load_pack, parse_pack
from kvdiag.analyzer.ingest.logparse import apply_envelope, match_events

PACKS = ("vllm_log",)
_HEAD = "schema = 1\nname='x'\n"
_EVENT = _HEAD + "[[event]]\nid='e'\nliteral='a'\n"
EVENT_SAMPLES = [
    pytest.param(pack, event, i, id=f"{pack}:{event.id}:{i}")
    for pack in PACKS
    for event in load_pack(pack).events
    for i in range(len(event.samples))
]
ENVELOPE_SAMPLES = [
    pytest.param(pack, step.id, i, id=f"{pack}:envelope:{step.id}:{i}")
    for pack in PACKS
    for step in load_pack(pack).envelope
    for i in range(len(step.samples))
]


def _one_line(line: str) -> pl.DataFrame:
    return pl.DataFrame({"line_no": [1], "text": [line]})


@pytest.mark.parametrize(("pack_name", "event", "index"), EVENT_SAMPLES)
def test_event_sample_matches_its_variant_and_yields_its_fields(
    pack_name: str, event: Event, index: int
) -> None:
    pack = load_pack(pack_name)
    sample = event.samples[index]
    frame = apply_envelope(_one_line(sample.line), pack)
    frame, rows = match_events(frame, pack)
    assert frame["event"][0] == event.id, f"matched {frame['event'][0]!r}, not {event.id}"
    (hit,) = [r for r in rows if r.event.id == event.id]
    variants = [v for v, _ in event.variants]
    assert variants[hit.frame["_variant"][0]] == sample.variant
    # Exactly its variant: no other variant of the event matches this message.
    msg = frame["msg"][0]
    others = [v for v, pattern in event.variants if v != sample.variant and re.search(pattern, msg)]
    assert not others, f"also matches variants {others}"
    for field, want in sample.expect.items():
        got = hit.frame[field][0]
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, (
            field,
            got,
            want,
        )


@pytest.mark.parametrize(("pack_name", "step_id", "index"), ENVELOPE_SAMPLES)
def test_envelope_sample_yields_its_fields(pack_name: str, step_id: str, index: int) -> None:
    pack = load_pack(pack_name)
    (step,) = [s for s in pack.envelope if s.id == step_id]
    sample = step.samples[index]
    frame = apply_envelope(_one_line(sample.line), pack)
    for field, want in sample.expect.items():
        assert frame[field][0] == want, (field, frame[field][0], want)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("schema = 2\nname='x'", "unsupported schema"),
        (_HEAD + "bogus = 1", "unknown key(s) ['bogus']"),
        (_EVENT + "table='nope'\nvariants={v='^a'}", "unknown table"),
        (
            _EVENT
            + "table='log_stats'\nfields={running='int'}\nvariants={v='^a (?P<running>\\d+)'}",
            "have no sample line",
        ),
        (_EVENT + "table='log_stats'\nfields={nope='int'}\nvariants={v='^a'}", "no column 'nope'"),
        (_EVENT + "table='log_stats'\nvariants={v='a'}", "anchored"),
    ],
    ids=["schema", "unknown-key", "unknown-table", "no-sample", "bad-column", "unanchored"],
)
def test_pack_loader_rejects_bad_packs(text: str, message: str) -> None:
    with pytest.raises(FormatPackError, match=re.escape(message)):
        parse_pack(text, "test.toml")
