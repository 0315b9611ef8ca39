"""glibc's malloc tuned only while ingesting, put back after (even on error), and left
alone when the user set its variables."""

from __future__ import annotations

import pytest

from kvdiag import _allocator
from kvdiag._allocator import heap_for_batches


class _FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int] | tuple[str, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


MIB64, KIB128 = 64 << 20, 128 << 10
TUNED = [("mallopt", -3, MIB64), ("mallopt", -1, MIB64)]
PUT_BACK = [("mallopt", -3, KIB128), ("mallopt", -1, KIB128), ("malloc_trim", 0)]


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> _FakeLibc:
    fake = _FakeLibc()
    monkeypatch.setattr(_allocator, "_libc", lambda: fake)
    for var in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(var, raising=False)
    return fake


def test_thresholds_are_raised_while_ingesting_and_put_back_after(libc: _FakeLibc) -> None:
    with heap_for_batches():
        assert libc.calls == TUNED
    assert libc.calls == TUNED + PUT_BACK


def test_they_are_put_back_when_ingestion_fails(libc: _FakeLibc) -> None:
    with pytest.raises(KeyboardInterrupt), heap_for_batches():
        raise KeyboardInterrupt
    assert libc.calls == TUNED + PUT_BACK


def test_a_user_setting_of_glibc_wins(libc: _FakeLibc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=1048576")
    with heap_for_batches():
        pass
    assert libc.calls == []


def test_without_glibc_nothing_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_allocator, "_libc", lambda: None)
    with heap_for_batches():
        big = bytearray(40 << 20)
    assert len(big) == 40 << 20


def test_on_this_system_the_real_calls_run() -> None:
    if _allocator._libc() is None:
        pytest.skip("the C library is not glibc: kvdiag leaves malloc alone")
    with heap_for_batches():
        blocks = [bytes(33 << 20) for _ in range(2)]  # from the heap, then reused
    assert [len(b) for b in blocks] == [33 << 20] * 2
