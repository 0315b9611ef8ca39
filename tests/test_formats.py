"""Every sample line of every format pack parses as declared, through the real code path."""

from __future__ import annotations

import re
from importlib import resources

import polars as pl
import pytest

from kvdiag.analyzer.ingest.logs.config_rows import config_rows, decode_dicts
from kvdiag.analyzer.ingest.logs.format_pack import Event, FormatPack, load_pack, parse_pack
from kvdiag.analyzer.ingest.logs.parse import apply_envelope, parsed_expr
from kvdiag.analyzer.ingest.logs.steps import Parsed, lines_frame, parse_batch
from kvdiag.domain.errors import FormatPackError

PACKS = ("vllm_log",)
_HEAD = "schema = 1\nname='x'\n"
_EVENT = _HEAD + "[[event]]\nid='e'\nliteral='a'\n"
EVENT_SAMPLES = [
    pytest.param(pack, event, i, id=f"{pack}:{event.id}:{i}")
    for pack in PACKS
    for event in load_pack(pack).events
    for i in range(len(event.samples))
]
CONFIG_SAMPLES = [
    pytest.param(pack, event, i, id=f"{pack}:{event.id}:{i}")
    for pack in PACKS
    for event in load_pack(pack).events
    for i, sample in enumerate(event.samples)
    if sample.config
]
ENVELOPE_SAMPLES = [
    pytest.param(pack, step.id, i, id=f"{pack}:envelope:{step.id}:{i}")
    for pack in PACKS
    for step in load_pack(pack).envelope
    for i in range(len(step.samples))
]
RECORD_SAMPLES = [
    pytest.param(pack, rec.id, i, id=f"{pack}:record:{rec.id}:{i}")
    for pack in PACKS
    for rec in load_pack(pack).records
    for i in range(len(rec.samples))
]


def _parse(pack: FormatPack, text: str) -> Parsed:
    return parse_batch(lines_frame(text.split("\n")), pack)


def _rows_of(parsed: Parsed, event: Event) -> pl.DataFrame:
    (hit,) = [r for r in parsed.events if r.event.id == event.id]
    assert hit.frame.height == 1, hit.frame
    return hit.frame


@pytest.mark.parametrize(("pack_name", "event", "index"), EVENT_SAMPLES)
def test_event_sample_matches_its_variant_and_yields_its_fields(
    pack_name: str, event: Event, index: int
) -> None:
    pack = load_pack(pack_name)
    sample = event.samples[index]
    parsed = _parse(pack, sample.line)
    events = parsed.frame["event"].to_list()
    assert events == [event.id] * len(events), f"lines matched {events}, not all {event.id}"
    assert parsed.frame.select(parsed_expr().all()).item(), "a line of the sample is unmatched"
    row = _rows_of(parsed, event)
    variants = [v for v, _ in event.variants]
    assert variants[row["_variant"][0]] == sample.variant
    # Exactly its variant: no other variant of the event matches this message.
    msg = row["msg"][0]
    others = [v for v, pattern in event.variants if v != sample.variant and re.search(pattern, msg)]
    assert not others, f"also matches variants {others}"
    for field, want in sample.expect.items():
        got = row[field][0]
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, (
            field,
            got,
            want,
        )


@pytest.mark.parametrize(("pack_name", "event", "index"), CONFIG_SAMPLES)
def test_event_sample_yields_its_config_rows(pack_name: str, event: Event, index: int) -> None:
    sample = event.samples[index]
    row = decode_dicts(_rows_of(_parse(load_pack(pack_name), sample.line), event), event)
    shaped = row.with_columns(
        pl.lit("f").alias("source_path"),
        pl.col("line_no").alias("source_line"),
        pl.col("clean").alias("raw"),
        pl.lit("r").alias("replica"),
    )
    config = config_rows(shaped, event)
    assert config is not None
    got = dict(zip(config["key"], config["value"], strict=True))
    for key, want in sample.config.items():
        assert got.get(key) == want, (key, got.get(key), want)


@pytest.mark.parametrize(("pack_name", "step_id", "index"), ENVELOPE_SAMPLES)
def test_envelope_sample_yields_its_fields(pack_name: str, step_id: str, index: int) -> None:
    pack = load_pack(pack_name)
    (step,) = [s for s in pack.envelope if s.id == step_id]
    sample = step.samples[index]
    frame = apply_envelope(lines_frame([sample.line]), pack)
    for field, want in sample.expect.items():
        assert frame[field][0] == want, (field, frame[field][0], want)


@pytest.mark.parametrize(("pack_name", "record_id", "index"), RECORD_SAMPLES)
def test_record_sample_is_that_record(pack_name: str, record_id: str, index: int) -> None:
    pack = load_pack(pack_name)
    (rec,) = [r for r in pack.records if r.id == record_id]
    parsed = _parse(pack, rec.samples[index].line)
    assert parsed.frame["record"].to_list() == [record_id]
    assert parsed.frame["event"].to_list() == [None]


@pytest.mark.parametrize("pack_name", PACKS)
def test_all_samples_parse_together_in_one_batch(pack_name: str) -> None:
    """Variants of one event meet in one batch in real files; their rows must combine."""
    pack = load_pack(pack_name)
    samples = [(e.id, s) for e in pack.events for s in e.samples]
    parsed = _parse(pack, "\n".join(s.line for _, s in samples))
    got: dict[str, int] = {}
    for rows in parsed.events:
        got[rows.event.id] = got.get(rows.event.id, 0) + rows.frame.height
    want: dict[str, int] = {}
    for event_id, _ in samples:
        want[event_id] = want.get(event_id, 0) + 1
    assert got == want
    assert parsed.frame.select(parsed_expr().all()).item()


def test_sample_sources_name_where_they_came_from() -> None:
    for pack_name in PACKS:
        pack = load_pack(pack_name)
        samples = [s for e in pack.events for s in e.samples]
        samples += [s for r in pack.records for s in r.samples]
        samples += [s for st in pack.envelope for s in st.samples]
        for s in samples:
            assert s.source, s.line
            # Real lines name their file under ../shared/realdata, the repo's recorded
            # fixtures, or the public thread they were pasted in (github:OWNER/REPO#N, for
            # engines no file under ../shared holds yet); the others say how they were built.
            real = s.source.startswith(("issues/", "vllm-cpu/", "../shared/", "fixtures/"))
            real = real or re.match(r"github:[\w.-]+/[\w.-]+#\d+", s.source) is not None
            assert real or s.source.startswith("constructed"), s.source


def test_a_line_with_an_events_literal_but_no_variant_is_unmatched() -> None:
    pack = load_pack("vllm_log")
    line = "INFO 02-19 23:56:55 [kv_cache_utils.py:524] GPU KV cache size: about 2 million tokens"
    parsed = _parse(pack, line)
    assert parsed.frame["near_miss"].to_list() == [True]
    assert not parsed.frame.select(parsed_expr()).item()


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
        (_EVENT + "table='log_stats'\nvariants={v='^(?=a)'}", "bad regex"),
        (
            _EVENT + "table='log_stats'\nfields={running='int'}\nvariants={v='^a'}\n"
            "extract={running='(\\d+) (\\d+)'}",
            "exactly one group",
        ),
        (_EVENT + "table='log_stats'\nvariants={v='^a'}\nconfig={k='nope'}", "not a field"),
        (_EVENT + "table='log_stats'\nvariants={v='^a'}\njoin='sideways'", "join 'sideways'"),
        (_HEAD + "[[record]]\nid='r'\npattern='^x'", "has no sample line"),
    ],
    ids=[
        "schema",
        "unknown-key",
        "unknown-table",
        "no-sample",
        "bad-column",
        "unanchored",
        "look-around",
        "extract-groups",
        "config-field",
        "join-mode",
        "record-sample",
    ],
)
def test_pack_loader_rejects_bad_packs(text: str, message: str) -> None:
    with pytest.raises(FormatPackError, match=re.escape(message)):
        parse_pack(text, "test.toml")


def test_every_bundled_pack_compiles_in_polars_as_loaded() -> None:
    # load_pack leaves the pattern checks to this test (0.06 s in polars and 0.03 s in
    # Python of every run otherwise).
    formats = resources.files("kvdiag.analyzer.ingest.logs") / "formats"
    packs = sorted(
        f.name[: -len(".toml")] for f in formats.iterdir() if f.name.endswith("_log.toml")
    )
    assert packs == ["sglang_log", "tgi_log", "trtllm_log", "vllm_log"]
    for name in packs:
        text = (formats / f"{name}.toml").read_text(encoding="utf-8")
        assert parse_pack(text, f"formats/{name}.toml", check="polars") == load_pack(name)
