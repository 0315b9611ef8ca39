"""Progress: every long phase reports (discovery, reading, the phases after ingestion), and
the terminal line is redrawn often enough to watch but not once per file."""

from __future__ import annotations

from pathlib import Path

from kvdiag.analyzer.ingest.base import InputUnit
from kvdiag.analyzer.progress import CHARTING, CHECKING, SAVING, TerminalProgress
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import FIXTURES

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"


class _Recorder:
    """A Progress that keeps every call."""

    def __init__(self) -> None:
        self.found_calls: list[tuple[int, int]] = []
        self.reading_calls: list[tuple[int, int, str, int, int]] = []
        self.units: dict[int, InputUnit] = {}
        self.events: list[str] = []

    def found(self, files: int, size: int) -> None:
        self.found_calls.append((files, size))
        if not self.events or self.events[-1] != "found":
            self.events.append("found")

    def reading(self, i: int, n: int, unit: InputUnit, done: int, lines: int) -> None:
        self.reading_calls.append((i, n, unit.rel, done, lines))
        self.units[i] = unit
        if not self.events or self.events[-1] != "reading":
            self.events.append("reading")

    def phase(self, name: str) -> None:
        self.events.append(name)


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_an_analysis_reports_discovery_reading_and_each_later_phase(tmp_path: Path) -> None:
    seen = _Recorder()
    analyze(AnalyzeOptions(incident=SATURATION, db=tmp_path / "kept.duckdb"), seen)
    assert seen.events == ["found", "reading", CHECKING, CHARTING, SAVING]
    files = _files_under(SATURATION)
    # Discovery counts every file it looks at, one call each, bytes adding up.
    assert [n for n, _ in seen.found_calls] == list(range(1, len(files) + 1))
    assert seen.found_calls[-1][1] == sum(p.stat().st_size for p in files)
    sizes = [size for _, size in seen.found_calls]
    assert sizes == sorted(sizes)


def test_each_input_is_reported_from_its_start_to_its_last_byte() -> None:
    seen = _Recorder()
    analyze(AnalyzeOptions(incident=SATURATION), seen)
    by_unit: dict[int, list[tuple[int, int]]] = {}
    for i, n, _, done, lines in seen.reading_calls:
        assert n == len(seen.units)
        by_unit.setdefault(i, []).append((done, lines))
    assert sorted(by_unit) == list(range(len(seen.units)))
    for i, calls in by_unit.items():
        assert calls[0] == (0, 0)
        assert calls == sorted(calls)  # bytes and lines only grow
        assert calls[-1][0] == seen.units[i].size_bytes
    scrapes = next(i for i, u in seen.units.items() if len(u.files) > 1)
    assert len(by_unit[scrapes]) >= 2  # a series reports batch by batch, not only at the end


def test_without_a_database_to_keep_nothing_says_it_is_written() -> None:
    seen = _Recorder()
    analyze(AnalyzeOptions(incident=SATURATION), seen)
    assert SAVING not in seen.events
    assert seen.events[-2:] == [CHECKING, CHARTING]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_discovery_of_many_files_is_drawn_a_few_times_a_second() -> None:
    written: list[str] = []
    clock = _Clock()
    view = TerminalProgress(written.append, clock, interval=0.125)
    for n in range(1, 1025):  # 1,024 files in half a second (binary fractions: exact)
        clock.now = n / 2048
        view.found(n, n * 54_000)
    # Drawn at the first file, then each time 0.125 s has passed since the last draw.
    assert written == [
        "\r\x1b[Kfinding inputs: 1 files, 0 MB",
        "\r\x1b[Kfinding inputs: 257 files, 14 MB, 2,056 files/s",
        "\r\x1b[Kfinding inputs: 513 files, 28 MB, 2,052 files/s",
        "\r\x1b[Kfinding inputs: 769 files, 42 MB, 2,051 files/s",
    ]


def test_each_input_and_each_phase_is_drawn_at_once_even_between_redraws() -> None:
    written: list[str] = []
    clock = _Clock()
    view = TerminalProgress(written.append, clock, interval=10.0)
    unit = InputUnit(
        "vllm_log", "server.log", (Path("server.log"),), ("server.log",), 2_000_000, "r"
    )
    view.found(1, 10)
    view.reading(0, 2, unit, 0, 0)
    view.reading(0, 2, unit, 1_000_000, 5)  # within the interval: not drawn
    view.reading(1, 2, unit, 0, 0)
    view.phase(CHECKING)
    view.clear()
    assert written == [
        "\r\x1b[Kfinding inputs: 1 files, 0 MB",
        "\r\x1b[K[1/2] reading server.log: 0 of 2 MB, 0 lines",
        "\r\x1b[K[2/2] reading server.log: 0 of 2 MB, 0 lines",
        f"\r\x1b[K{CHECKING} ...",
        "\r\x1b[K",
    ]


def test_reading_reports_its_rate_since_the_input_began() -> None:
    written: list[str] = []
    clock = _Clock()
    view = TerminalProgress(written.append, clock, interval=0.1)
    unit = InputUnit("vllm_log", "a.log", (Path("a.log"),), ("a.log",), 8_000_000, "r")
    clock.now = 5.0
    view.reading(0, 1, unit, 0, 0)
    clock.now = 7.0
    view.reading(0, 1, unit, 8_000_000, 300_000)
    assert written[-1] == "\r\x1b[K[1/1] reading a.log: 8 of 8 MB, 300,000 lines, 150,000 lines/s"
