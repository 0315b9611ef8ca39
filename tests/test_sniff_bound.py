"""Discovery skips sniffs that cannot win (`Ingester.sniff_bound`): same answer as asking all.

The log ingesters parse a file's head to find a quoted fragment's events; once a surer
ingester has claimed the file, discovery does not ask them. These tests hold the shortcut
to the exhaustive classification (every ingester sniffs, the highest score wins, ties to
the later) on every file of the fixtures and of the real pasted fragments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.analyzer.discovery import discover
from kvdiag.analyzer.ingest.logs import steps
from kvdiag.analyzer.ingest.registry import INGESTERS
from tests.conftest import FIXTURES, shared


def _exhaustive(name: str, text: str) -> tuple[int, str]:
    score, _, best = max((ing.sniff(name, text), i, ing) for i, ing in enumerate(INGESTERS))
    return score, best.kind


def _heads(paths: list[Path], limit_per_folder: int) -> list[tuple[str, str]]:
    """(name, decoded head) of the files, a few per folder and suffix (scrape series)."""
    heads: list[tuple[str, str]] = []
    per_folder: dict[tuple[Path, str], int] = {}
    for path in sorted(p for p in paths if p.is_file()):
        key = (path.parent, path.suffix)
        if per_folder.setdefault(key, 0) >= limit_per_folder:
            continue
        per_folder[key] += 1
        with path.open("rb") as f:
            head = f.read(64 * 1024)
        if head and not discover._looks_binary(head):
            heads.append((path.name, discover._decode_head(head)))
    return heads


def _assert_same(heads: list[tuple[str, str]]) -> None:
    assert heads
    for name, text in heads:
        score, best = discover._best_sniff(name, text)
        assert (score, best.kind) == _exhaustive(name, text), name


def test_every_fixture_file_is_classified_as_by_every_sniff() -> None:
    # The incidents' inputs; goldens (reports quoting log lines) would only repeat them.
    _assert_same(_heads(list(FIXTURES.glob("**/incident*/**/*")), limit_per_folder=1))


def test_every_real_fragment_is_classified_as_by_every_sniff() -> None:
    fragments = shared("realdata", "issues")
    _assert_same(_heads(list(fragments.iterdir()), limit_per_folder=1_000))


def test_a_vllm_log_is_not_parsed_under_other_engines_packs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = FIXTURES / "vllm-b-saturation" / "incident" / "server.log"
    head = discover._decode_head(log.read_bytes()[: 64 * 1024])
    parsed: list[str] = []
    real = steps.pack_events

    def counted(pack_name: str, text: str) -> int:
        parsed.append(pack_name)
        return real(pack_name, text)

    for module in ("vllm", "engine_log", "sglang"):
        monkeypatch.setattr(f"kvdiag.analyzer.ingest.logs.{module}.pack_events", counted)
    score, best = discover._best_sniff("server.log", head)
    assert (score, best.kind) == (90, "vllm_log")
    assert parsed == []  # the vLLM words decide it; no engine's pack can beat 90 but by header
