"""Page-cache hints: announcing a file never changes what is read, never blocks, and the
walk's prefetch announces only once reads are slow, a window ahead, each file once."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.metrics.scrape_files import batches
from kvdiag.analyzer.text import prefetch
from kvdiag.analyzer.text.prefetch import HeadPrefetch, announce
from tests.conftest import FIXTURES

SCRAPES = FIXTURES / "vllm-b-saturation" / "incident" / "metrics"


def test_announcing_gives_the_size_and_a_missing_file_counts_zero(tmp_path: Path) -> None:
    f = tmp_path / "a.prom"
    f.write_bytes(b"x" * 12345)
    assert announce(f) == 12345
    assert announce(str(f), 4096) == 12345
    assert announce(tmp_path / "gone.prom") == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_announcing_a_fifo_returns_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    sizes: list[int] = []
    t = threading.Thread(target=lambda: sizes.append(announce(fifo)), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "announce blocked on a FIFO with no writer"
    assert sizes == [0]


def test_scrape_batches_are_sized_from_the_files_as_before() -> None:
    files = sorted(SCRAPES.iterdir())
    groups = list(batches(files, batch_bytes=200_000))
    assert [i for g in groups for i in g.indices] == list(range(len(files)))
    for g in groups:
        assert g.size == sum(files[i].stat().st_size for i in g.indices)
        assert g.size >= 200_000 or g is groups[-1]


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(prefetch, "announce", lambda path, length=0: calls.append(path) or 0)
    return calls


def test_slow_reads_start_announcing_a_window_ahead_each_file_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _recording(monkeypatch)
    paths: list[str | None] = [f"f{i}" for i in range(26)]
    paths[13] = None  # not a regular file: never opened
    walk = HeadPrefetch(paths, 4096, window=4, slow_us=0.0)  # any pace is "slow"
    for k in range(len(paths)):
        walk.before(k)
        if k < 12:
            assert calls == []  # the first window does not count; two slow ones must follow
    assert walk.cold
    expected = [p for p in paths[12:] if p is not None]
    assert calls == expected  # from the third check on, in order, once each, to the end


def test_fast_reads_announce_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _recording(monkeypatch)
    walk = HeadPrefetch([f"f{i}" for i in range(100)], 4096, window=8, slow_us=1e9)
    for k in range(100):
        walk.before(k)
    assert not walk.cold
    assert calls == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_discovery_with_announcing_on_sets_a_fifo_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scrape = min(SCRAPES.iterdir()).read_bytes()
    for i in range(40):
        (tmp_path / f"{1764423303 + i}.prom").write_bytes(scrape)
    os.mkfifo(tmp_path / "zz-pipe")
    init = HeadPrefetch.__init__

    def always_cold(self: HeadPrefetch, paths: list[str | None], length: int) -> None:
        init(self, paths, length, window=4, slow_us=0.0)

    monkeypatch.setattr(HeadPrefetch, "__init__", always_cold)
    found: list[object] = []
    t = threading.Thread(target=lambda: found.append(discover(tmp_path)), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "discovery blocked"
    (d,) = found
    assert [u.kind for u in d.units] == ["prom_text"] and len(d.units[0].files) == 40
    assert [(r.path, r.reason) for r in d.set_aside] == [("zz-pipe", "not a regular file")]
