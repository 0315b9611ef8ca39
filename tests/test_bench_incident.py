"""bench/make_incident.py replays the real scrapes of a fixture as a live server's would go on."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.bench_support import load_bench


def _make_incident() -> ModuleType:
    return load_bench("make_incident")


def _counters(path: Path) -> dict[bytes, float]:
    out = {}
    for line in path.read_bytes().split(b"\n"):
        head, _, value = line.rpartition(b" ")
        name = head.split(b"{", 1)[0]
        if not line.startswith(b"#") and name.endswith((b"_total", b"_count", b"_bucket")):
            out[head] = float(value)
    return out


def test_replayed_scrapes_continue_the_real_counters_and_keep_every_line(tmp_path: Path) -> None:
    mi = _make_incident()
    sources = sorted((mi.FIXTURE / "metrics").glob("*.prom"))
    passes = 2
    folder = mi.make_scrapes(tmp_path, len(sources) * passes + 17)
    made = sorted(folder.glob("*.prom"), key=lambda p: float(p.stem))
    last: dict[bytes, float] = {}
    for path in made:
        counters = _counters(path)
        # Counters never fall: a pass over the real files starts where the last one ended.
        assert all(value >= last.get(head, value) for head, value in counters.items()), path
        last = counters
    real_first, real_last = _counters(sources[0]), _counters(sources[-1])
    rise = {h: real_last[h] - real_first[h] for h in real_first}
    risen = [h for h, r in rise.items() if r > 0]
    assert risen, "the fixture's counters rise"
    third_pass = _counters(made[2 * len(sources)])
    for head in risen:
        assert third_pass[head] == real_first[head] + 2 * rise[head]
    # Same lines as the real files, in the same order: only numbers change.
    for made_path, source in zip(made, sources, strict=False):
        made_lines = made_path.read_bytes().split(b"\n")
        real_lines = source.read_bytes().split(b"\n")
        assert [line.rpartition(b" ")[0] for line in made_lines] == [
            line.rpartition(b" ")[0] for line in real_lines
        ]


def test_a_crash_loop_replays_the_whole_log_ten_minutes_later_each_time(tmp_path: Path) -> None:
    mi = _make_incident()
    real = (mi.FIXTURE / "server.log").read_bytes().rstrip(b"\n").split(b"\n")
    made = mi.make_crashloop(tmp_path, 3 * (len(b"\n".join(real)) + 1) / 1e9)
    lines = made.read_bytes().rstrip(b"\n").split(b"\n")
    assert len(lines) == 3 * len(real)
    for copy in range(3):
        for line, original in zip(lines[copy * len(real) :], real, strict=False):
            # Same line but its time, moved by 10 minutes a copy (the same month and day here).
            assert mi._TS.sub(b"", line) == mi._TS.sub(b"", original)
            shifted = mi._line_time(line, 2026)
            if shifted is not None:
                assert shifted - mi._line_time(original, 2026) == copy * mi.CRASHLOOP_EVERY
