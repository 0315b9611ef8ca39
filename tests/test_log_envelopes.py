"""Engine messages behind whatever precedes them, and records a terminal broke into lines.

A real stats, preemption or pool line reads to the same event and values with or without
its header, behind any deployment's prefix (quoting, indentation, a Python logging format,
a container, CI or collector stamp, a compose prefix), and wrapped at any width from 20 on,
with or without the container stamp on its first piece: the original line's own reading
is the oracle. The transformed fixtures read to their source fixture's rows.
"""

from __future__ import annotations

import re
import tempfile
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.logs.sglang import SglangLogIngester
from kvdiag.analyzer.ingest.logs.steps import lines_frame, parse_batch
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester
from tests.conftest import FIXTURES, REALDATA

PACK = load_pack("vllm_log")
SGLANG = load_pack("sglang_log")
EVENTS = (
    "stats_v0",
    "stats_v1",
    "v0_preempted",
    "kv_cache_size",
    "gpu_blocks",
    "max_concurrency",
    "available_kv_memory",
)
_HEADER = re.compile(
    r"^(?:\S+ )?(?:\([^)]*pid=\d+[^)]*\) )?(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d "
    r"\d\d:\d\d:\d\d \[?[\w./-]+:\d+\] "
)


def _real_lines() -> list[str]:
    """The pack's samples of these events, and every such line of the real logs (../shared)."""
    lines = [s.line for e in PACK.events if e.id in EVENTS for s in e.samples]
    if REALDATA.exists():
        files = sorted(REALDATA.glob("issues/vllm-*.log"))
        files += sorted(REALDATA.glob("vllm-cpu/*/server.log"))
        for path in files:
            lines += path.read_text(encoding="utf-8", errors="replace").split("\n")
    found = []
    for line in dict.fromkeys(lines):
        if any(e.literal in line for e in PACK.events if e.id in EVENTS):
            got = _reading([line])  # one record a line (glued records are another repair)
            if len(got) == 1 and got[0][0] in EVENTS:
                found.append(line)
    return found


def _reading(lines: list[str], pack=PACK) -> list[tuple[str, tuple]]:  # type: ignore[no-untyped-def]
    """(event, field values) of every event row the lines parse to, in line order."""
    parsed = parse_batch(lines_frame(lines), pack)
    out = []
    for rows in parsed.events:
        fields = list(rows.event.fields)
        for row in rows.frame.sort("line_no").select(fields).iter_rows():
            out.append((rows.event.id, row))
    return sorted(out, key=repr)


REAL = _real_lines()
# What a deployment or a paste puts before the engine's text.
ENVELOPES = (
    " ",
    "    ",
    "\t",
    "> ",
    "> > ",
    "2025-01-01 10:00:00,123 - vllm.core.scheduler - WARNING - ",
    "2025-01-01 10:00:00,123 INFO vllm.engine: ",
    "2025-01-01T10:00:00.123456789Z ",  # docker / kubectl logs --timestamps
    "2025-01-01T10:00:00.123456+00:00 ",
    "[2025-01-01T10:00:00.123Z] ",  # Jenkins timestamper
    "2025-01-01T10:00:00.1234567Z 00O ",  # GitLab runner
    "2025-01-01 10:00:00.123\t",  # a collector's export, tab-separated
    "vllm-1  | ",  # docker compose
    "[pod/vllm-0/vllm] ",  # kubectl --prefix
    "[build 1234] ",
)
_STAMP = "2025-05-12T08:01:31.331095044Z "


def _headerless(line: str) -> str:
    return _HEADER.sub("", line, count=1)


@pytest.mark.skipif(not REAL, reason="no real lines")
@given(st.sampled_from(REAL), st.sampled_from(ENVELOPES), st.booleans())
def test_a_message_reads_the_same_behind_any_envelope(
    line: str, envelope: str, strip_header: bool
) -> None:
    want = _reading([line])
    text = _headerless(line) if strip_header else line
    assert _reading([envelope + text]) == want, envelope + text


def _wrap(line: str, width: int, strip: bool) -> list[str]:
    pieces = [line[i : i + width] for i in range(0, len(line), width)]
    return [p.rstrip() for p in pieces] if strip else pieces


@pytest.mark.skipif(not REAL, reason="no real lines")
@given(st.sampled_from(REAL), st.integers(20, 300), st.booleans(), st.booleans())
def test_a_wrapped_line_reads_the_same_at_any_width(
    line: str, width: int, stamp: bool, strip: bool
) -> None:
    """With the container stamp on the first piece or not; a copy may strip each piece's
    trailing blank."""
    want = _reading([line])
    pieces = _wrap((_STAMP if stamp else "") + line, width, strip)
    assert _reading(pieces) == want, pieces


def _ingest(lines: list[str], ingester: type = VllmLogIngester) -> tuple[dict, Account]:
    """The ingester (fast lanes and all) on the lines saved as a file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "server.log"
        path.write_text("\n".join(lines) + "\n")
        unit = InputUnit("log", path.name, (path,), (path.name,), path.stat().st_size, "r")
        frames: dict[str, list[pl.DataFrame]] = defaultdict(list)
        accounts = []
        for emit in ingester().ingest(unit, IngestContext(path.parent, 2025, None, None)):
            if isinstance(emit, TableBatch):
                frames[emit.table].append(emit.frame)
            elif isinstance(emit, Account):
                accounts.append(emit)
    (acct,) = accounts
    return {t: pl.concat(f, how="diagonal_relaxed") for t, f in frames.items()}, acct


@pytest.mark.skipif(not REAL, reason="no real lines")
@given(st.lists(st.sampled_from(REAL), min_size=2, max_size=4), st.integers(20, 200))
def test_wrapped_records_in_a_file_are_every_one_read_and_counted(
    lines: list[str], width: int
) -> None:
    """A file of wrapped records: each record read back, every piece parsed, each join
    counted; as a terminal copy of `docker logs --timestamps` would show them."""
    pieces = [p for line in lines for p in _wrap(_STAMP + line, width, strip=False)]
    tables, acct = _ingest(pieces)
    assert acct.lines_unmatched == 0, acct.templates
    wrapped = sum(len(_wrap(_STAMP + line, width, strip=False)) > 1 for line in lines)
    counted = [n for n in acct.notes if n.startswith("rejoined wrapped lines: ")]
    if wrapped:
        assert counted and counted[0].startswith(f"rejoined wrapped lines: {wrapped} "), acct.notes
    read = sum(frame.height for name, frame in tables.items() if name.startswith("log_"))
    assert read == sum(len(_reading([line])) for line in lines)


SG_LINES = [
    "[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, "
    "cuda graph: True, gen throughput (token/s): 446.45, #queue-req: 5,",
    "[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, "
    "#new_token_ratio: 0.1474 -> 0.1845",
]


@pytest.mark.parametrize("line", SG_LINES)
@pytest.mark.parametrize(
    "envelope", ["", "> ", "    ", "2025-01-01T10:00:00.123Z ", "sglang-1  | "]
)
@pytest.mark.parametrize("width", [None, 20, 47, 100])
def test_sglang_lines_read_the_same_behind_an_envelope_or_wrapped(
    line: str, envelope: str, width: int | None
) -> None:
    """Real SGLang lines (issues/sglang-decode-high-usage-queue-9.log:1,
    sglang-decode-oom-retract-multi-tp-10.log:1): the same machinery, SGLang's pack."""
    want = _reading([line], SGLANG)
    text = envelope + line
    got = _reading(_wrap(text, width, False) if width else [text], SGLANG)
    assert got == want


# The fixtures built for this: each reads to the rows of the fixture it was made from.
TRANSFORMED = {
    "vllm-b-docker-wrapped-120": "vllm-b-saturation",
    "vllm-a-compose-wrapped-100": "vllm-a-healthy",
    "vllm-b-python-logging-format": "vllm-b-saturation",
}
_ROW_KEYS = ("event", "running", "waiting", "kv_usage_pct", "tokens", "max_model_len", "key")


def _rows(folder: str, name: str) -> tuple[dict[str, list[tuple]], Account]:
    path = FIXTURES / folder / "incident" / name
    tables, acct = _ingest(path.read_text().split("\n")[:-1])
    out = {}
    for table, frame in tables.items():
        cols = [c for c in _ROW_KEYS if c in frame.columns]
        if table == "config":
            cols = ["key", "value"]
        out[table] = sorted(frame.select(cols).iter_rows(), key=repr)
    return out, acct


@pytest.mark.parametrize("fixture", sorted(TRANSFORMED))
def test_a_transformed_fixture_reads_to_its_source_rows(fixture: str) -> None:
    got, acct = _rows(fixture, "server.log")
    want, _ = _rows(TRANSFORMED[fixture], "server.log")
    assert got == want
    assert acct.lines_unmatched == 0, acct.templates


def _counts(acct: Account) -> dict[str, int]:
    """The account's notes that count something: `label: N (lines ...)`."""
    return {m[1]: int(m[2]) for n in acct.notes if (m := re.match(r"^(.+?): (\d+)(?: |$)", n))}


def _event_lines(lines: list[str]) -> set[int]:
    """Line numbers some event of the lines read (a multi-line message: all its lines)."""
    out: set[int] = set()
    for rows in parse_batch(lines_frame(lines), PACK).events:
        for first, last in rows.frame.select("line_no", "line_end").iter_rows():
            out.update(range(first, last + 1))
    return out


@pytest.mark.parametrize(
    ("fixture", "source", "added", "width"),
    [
        (
            "vllm-b-docker-wrapped-120",
            "vllm-b-saturation",
            len("2025-11-29T13:34:06.001000117Z "),
            120,
        ),
        ("vllm-a-compose-wrapped-100", "vllm-a-healthy", len("vllm-1  | "), 100),
    ],
)
def test_a_wrapped_fixture_counts_a_repair_per_wrapped_line(
    fixture: str, source: str, added: int, width: int
) -> None:
    """Independently: the source lines longer than the terminal once prefixed, those an
    event reads (rejoined wrapped lines) and the others (rejoined wrapped records)."""
    lines = (FIXTURES / source / "incident" / "server.log").read_text().split("\n")[:-1]
    events = _event_lines(lines)
    wrapped = [n for n, line in enumerate(lines, 1) if len(line) + added > width]
    _, acct = _rows(fixture, "server.log")
    counts = _counts(acct)
    assert counts["rejoined wrapped lines"] == sum(n in events for n in wrapped)
    assert counts["rejoined wrapped records"] == sum(n not in events for n in wrapped)


def test_the_container_stamps_of_a_wrapped_log_date_it() -> None:
    _, acct = _rows("vllm-b-docker-wrapped-120", "server.log")
    assert "year 2025 from container timestamp (server.log:1)" in acct.notes


def test_a_learned_logging_format_makes_its_other_lines_records() -> None:
    """Only the messages carry the signature; the format they repeat behind is learned, so
    the lines of that format without an event are its records, and its stamps time them."""
    path = FIXTURES / "vllm-b-python-logging-format" / "incident" / "server.log"
    lines = path.read_text().split("\n")[:-1]
    formatted = [
        n for n, line in enumerate(lines, 1) if re.search(r"\d,\d{3} - vllm\.\S+ - [A-Z]+ - ", line)
    ]
    tables, acct = _rows("vllm-b-python-logging-format", "server.log")
    found = sum(len(rows) for name, rows in tables.items() if name not in ("config", "log_http"))
    counts = _counts(acct)
    assert counts["lines read behind an unknown prefix"] == found  # every event behind it
    assert counts["lines read behind the file's learned prefix"] == len(formatted) - found
    assert "year 2025 from container timestamp (server.log:2)" in acct.notes


@pytest.mark.parametrize(
    ("fixture", "waiting"),
    [("vllm-b-ticket-headerless-bodies", 30), ("vllm-a-ticket-headerless-bodies", 0)],
)
def test_a_ticket_body_gives_the_stats_of_its_source(fixture: str, waiting: int) -> None:
    got, acct = _rows(fixture, "ticket.md")
    source = "vllm-b-saturation" if waiting else "vllm-a-healthy"
    want, _ = _rows(source, "server.log")
    assert got["log_stats"] == want["log_stats"]
    pool = [row for row in want["log_kv_pool"] if row[0] == "kv_cache_size"]
    assert got["log_kv_pool"] == pool
    # The prose, the Markdown fences and the events dump stay unmatched: they are no log.
    assert acct.lines_unmatched == 17


def _one(line: str) -> list[tuple[str, tuple]]:
    return _reading([line])


def test_a_message_cut_short_is_not_read_as_a_shorter_variant() -> None:
    """`Running: N reqs, Waiting: M reqs` ends a 0.7.0 line; inside a cut v1 line it is no
    message: the text before it holds the stats literal, so it is no envelope."""
    cut = (
        "Engine 000: Avg prompt throughput: 808.1 tokens/s, Avg generation throughput: 181.3 "
        "tokens/s, Running: 6 reqs, Waiting: 30 reqs"
    )
    assert _one(cut) == []
    assert _one("> Running: 6 reqs, Waiting: 30 reqs") != []


def test_common_words_in_a_sentence_are_no_event() -> None:
    """Events whose literal is common (the launch command) are not sought mid-line."""
    assert _one("led. Restart vllm serve with --enable-scale-out to enable them.") == []


def test_a_complete_line_is_not_joined_to_a_longer_one_after_it() -> None:
    """A traceback line before a CUDA OOM line is no first piece: a terminal's first piece
    is its widest (fixtures/gpu-overcommit-oom-3090, lines 15-16)."""
    path = FIXTURES / "gpu-overcommit-oom-3090" / "incident" / "server.log"
    lines = path.read_text().split("\n")[14:17]
    parsed = parse_batch(lines_frame(lines, 15), PACK)
    (oom,) = [rows.frame for rows in parsed.events if rows.event.id == "cuda_oom"]
    assert oom["line_no"].to_list() == [16]
    assert oom["repair"].to_list() == [None]


def test_a_record_at_full_width_keeps_its_own_reading() -> None:
    """A spec-decoding line (its variant ends in `.*`) followed by a shorter traceback line:
    joined they read the same values, so the join is not taken."""
    spec = next(s.line for e in PACK.events if e.id == "spec_decoding" for s in e.samples)
    lines = [spec, "Traceback (most recent call last):"]
    parsed = parse_batch(lines_frame(lines), PACK)
    assert parsed.frame["record"].to_list()[1] == "traceback"
    assert [r.frame["line_end"].to_list() for r in parsed.events] == [[1]]


def test_a_prefix_seen_once_is_not_learned() -> None:
    """One anchored line is no envelope of the file: a line of the same shape without an
    engine message stays unmatched."""
    lines = [
        "2025-01-01 10:00:00,123 - vllm.core.scheduler - WARNING - " + REAL_PREEMPTION,
        "2025-01-01 10:00:01,000 - vllm.worker - INFO - loading something",
    ]
    parsed = parse_batch(lines_frame(lines), PACK)
    assert parsed.frame["event"].to_list() == ["v0_preempted", None]
    lines.insert(1, lines[0].replace("10:00:00,123", "10:00:00,500"))
    parsed = parse_batch(lines_frame(lines), PACK)
    assert parsed.frame["_envelope"].to_list()[2] is True  # learned: a record of that logger


REAL_PREEMPTION = (
    "Sequence group 147 is preempted by PreemptionMode.RECOMPUTE mode because there is not "
    "enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=1"
)  # issues/vllm-v0-preempt-warning-traceback-2.log:1, its header cut off


def test_sglang_ingester_reads_a_quoted_sglang_paste() -> None:
    _, acct = _ingest(["> " + line for line in SG_LINES], SglangLogIngester)
    assert acct.lines_unmatched == 0
    assert "lines read behind an unknown prefix: 2 (lines 1, 2)" in acct.notes
