"""Load peaks read from the stats lines cite the first line (in time) at the peak."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import FIXTURES

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"
_STATS = re.compile(r"Running: (\d+) reqs, Waiting: (\d+) reqs, .*KV cache usage: ([\d.]+)%")


def _first_peaks(text: str) -> dict[str, tuple[float, int]]:
    """Each gauge's peak and the first line (1-based) holding it, read plainly."""
    # Lines as grep numbers them (the log holds carriage returns; splitlines cuts there).
    found = [(n, m) for n, line in enumerate(text.split("\n"), 1) if (m := _STATS.search(line))]
    out = {}
    for name, group, scale in (
        ("max_requests_running", 1, 1.0),
        ("max_requests_waiting", 2, 1.0),
        ("peak_kv_usage", 3, 0.01),
    ):
        values = [(n, float(m.group(group))) for n, m in found]
        peak = max(v for _, v in values)
        out[name] = (peak * scale, next(n for n, v in values if v == peak))
    return out


@pytest.mark.parametrize("name", ["peak_kv_usage", "max_requests_waiting", "max_requests_running"])
def test_a_peak_from_stats_lines_cites_its_first_line(tmp_path: Path, name: str) -> None:
    text = (SATURATION / "server.log").read_bytes().decode()  # no newline translation
    shutil.copy(SATURATION / "server.log", tmp_path / "server.log")  # no /metrics: the log
    facts = analyze(AnalyzeOptions(incident=tmp_path)).diagnosis.facts
    value, line = _first_peaks(text)[name]
    fact = facts[name]
    assert fact.value == pytest.approx(value)
    assert fact.source is not None and (fact.source.path, fact.source.line) == ("server.log", line)
