"""The fast lanes decide each line exactly as the full parse does.

ingest/logs/triage.py reads most lines of a vLLM log with one or two cheap tests and sends the
rest, with their neighbours, through the full parse. These tests read the same files
both ways (fast lanes, and every line through the full parse) and require the same
store rows, the same line accounting and the same notes: on every real log, every
fixture, the hostile corpus, and generated mixes of the shapes that border the lanes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.ingest.base import Account, IngestContext, InputProblem, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.logs.triage import Lanes, vllm_lanes
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester
from kvdiag.analyzer.text import lines as line_reader
from tests.conftest import FIXTURES, REALDATA

HOSTILE = Path(__file__).resolve().parent / "hostile"


class _FullParse(VllmLogIngester):
    """The same ingester with every line through the full parse."""

    @property
    def lanes(self) -> Lanes | None:
        return None


Read = tuple[dict[str, pl.DataFrame], list[Account], list[InputProblem]]


def _read(ingester: VllmLogIngester, path: Path) -> Read:
    unit = InputUnit("vllm_log", path.name, (path,), (path.name,), path.stat().st_size, "r")
    frames: dict[str, list[pl.DataFrame]] = defaultdict(list)
    accounts, problems = [], []
    for emit in ingester.ingest(unit, IngestContext(path.parent, 2026, None, None)):
        if isinstance(emit, TableBatch):
            frames[emit.table].append(emit.frame)
        elif isinstance(emit, Account):
            accounts.append(emit)
        else:
            problems.append(emit)
    tables = {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in frames.items()}
    return tables, accounts, problems


def _same(path: Path) -> None:
    fast, full = _read(VllmLogIngester(), path), _read(_FullParse(), path)
    assert fast[1] == full[1], path
    assert fast[2] == full[2], path
    assert sorted(fast[0]) == sorted(full[0]), path
    for name, frame in full[0].items():
        order = [c for c in ("source_line", "key", "process", "method", "path", "status")]
        order = [c for c in order if c in frame.columns]
        got = fast[0][name].select(frame.columns).sort(order, nulls_last=True)
        assert got.equals(frame.sort(order, nulls_last=True)), (path, name)


def _logs() -> list[Path]:
    found = sorted(REALDATA.glob("issues/vllm-*.log")) + sorted(
        REALDATA.glob("vllm-cpu/*/server.log")
    )
    found += sorted(FIXTURES.glob("*/incident/**/*.log"))
    found += sorted(p for p in HOSTILE.glob("*.log") if p.is_file())
    return found


@pytest.mark.parametrize("path", _logs(), ids=lambda p: p.name)
def test_fast_lanes_read_every_log_as_the_full_parse_does(path: Path) -> None:
    _same(path)


def test_fast_lanes_match_in_tiny_batches_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch edges fall inside every context (wraps, joins, stacked prefixes)."""
    monkeypatch.setattr(line_reader, "BATCH_BYTES", 700)
    for path in _logs()[:40]:
        _same(path)


_HEADERS = (
    "(APIServer pid=21282) INFO 11-29 13:35:11 [loggers.py:335] ",
    "INFO 06-16 10:03:14 [loggers.py:87] ",
    "(EngineCore_DP0 pid=1944) WARNING 09-24 20:53:41 [kv_cache_utils.py:864] ",
    "(VllmWorker rank=0 pid=7) INFO 09-24 20:53:41 [gpu_worker.py:1] ",
    "(Worker_TP3_EP3 pid=2081) (Worker_TP6_EP6 pid=2084) INFO 09-24 20:53:37 [monitor.py:34] ",
    "[vllm]INFO 06-16 10:03:14 [loggers.py:87] ",
    "2026-05-12T08:01:39.331095044Z (APIServer pid=1) INFO 05-12 08:01:39 [loggers.py:271] ",
    "",
)
_MESSAGES = (
    "Engine 000: Avg prompt throughput: 808.1 tokens/s, Avg generation throughput: 181.3 "
    "tokens/s, Running: 6 reqs, Waiting: 30 reqs, CPU KV cache usage: 95.5%, Prefix cache hit "
    "rate: 0.0%",
    "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 "
    "reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, CPU KV cache usage: 0.0%.",
    "Engine 000: Avg prompt throughput: 808.1 tokens/s, Avg generation throughput: 181.3 tok",
    "ens/s, Running: 6 reqs, Waiting: 30 reqs, CPU KV cache usage: 95.5%",
    "GPU KV cache size: 238,208 tokens",
    "Memory profiling takes 5.2 seconds",
    "[shutdown] EngineCore: exiting busy loop",
    "torch.compile takes 144.97 s in total",
    "$ vllm serve Qwen/Qwen3 \\",
    "    --tensor-parallel-size 8 \\",
)
_BARE = (
    'INFO:     127.0.0.1:42302 - "GET /metrics HTTP/1.1" 200 OK',
    'INFO:     10.0.3.7:40214 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable',
    'INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 200 OK vllm serve x',
    'INFO:     127.0.0.1:1 - "GET /a - "GET /b HTTP/1.1" 200 OK',
    'INFO:     a b - "GET / HTTP/1.1" 200 OK',
    "INFO:     Started server process [21282]",
    'INFO:     127.0.0.1:1 - "GET /\x1b[31m HTTP/1.1" 200 OK',
    "nanobind: leaked 4 instances!",
    ' - leaked type "triton._C.libtriton.ir.location"',
    "  warnings.warn('resource_tracker: There appear to be %d '",
    "Traceback (most recent call last):",
    "eqs, Waiting: 30 reqs, CPU KV cache usage: 95.5%",
    "garbage \ufffd line",
    "",
)
_LINES = st.one_of(
    st.builds(lambda h, m: h + m, st.sampled_from(_HEADERS), st.sampled_from(_MESSAGES)),
    st.sampled_from(_BARE),
    st.builds(lambda a, b: a + b, st.sampled_from(_MESSAGES), st.sampled_from((*_HEADERS, "0.0%"))),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_LINES, min_size=1, max_size=40))
def test_fast_lanes_match_on_mixed_shapes(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    path = tmp_path_factory.mktemp("mix") / "server.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _same(path)


def test_v1_stats_lines_never_match_a_v0_variant() -> None:
    """The proof vllm_lanes relies on to read v1 stats lines in the fast lane."""
    pack = load_pack("vllm_log")
    (v0,) = [e for e in pack.events if e.id == "stats_v0"]
    (v1,) = [e for e in pack.events if e.id == "stats_v1"]
    for sample in v1.samples:
        message = re.sub(r"^.*?\] ", "", sample.line)
        assert not any(re.match(v, message) for _, v in v0.variants), sample.line
    assert {h.event.id for h in vllm_lanes().hot} == {"stats_v0", "stats_v1"}
