"""kvdiag configures polars' jemalloc before polars loads, limits glibc's arenas to one per
core at start, and tunes glibc's malloc thresholds only while ingesting, put back after
(even on error); each left alone when the user set its variables (kvdiag/_allocator.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvdiag import _allocator
from kvdiag._allocator import (
    POLARS_MALLOC_CONF,
    POLARS_MALLOC_CONF_VAR,
    heap_for_batches,
    limit_glibc_arenas,
)

# Loads kvdiag, then polars, and makes polars allocate on its threads.
_PROBE = (
    "import os, kvdiag, polars as pl\n"
    "frame = pl.DataFrame({'a': range(200_000)}).with_columns(b=pl.col('a').cast(pl.String))\n"
    "assert frame.group_by(pl.col('a') % 7).agg(pl.col('b').str.len_chars().sum()).height == 7\n"
    f"print(os.environ.get({POLARS_MALLOC_CONF_VAR!r}))\n"
)


def _probe(env_value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != POLARS_MALLOC_CONF_VAR}
    if env_value is not None:
        env[POLARS_MALLOC_CONF_VAR] = env_value
    return subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )


_LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="polars uses jemalloc on Linux"
)


@_LINUX_ONLY
def test_importing_kvdiag_sets_the_polars_allocator_options_and_jemalloc_accepts_them() -> None:
    done = _probe(None)
    # polars puts its own defaults first; the later options win.
    assert done.stdout.strip().endswith("," + POLARS_MALLOC_CONF)
    # jemalloc names every option it does not know on stderr ("Invalid conf pair").
    assert "jemalloc" not in done.stderr


@_LINUX_ONLY
def test_jemalloc_would_name_a_bad_option_so_the_check_above_can_fail() -> None:
    assert "Invalid conf pair" in _probe("narenas:1,no_such_option:3").stderr


def test_a_value_the_user_set_is_kept() -> None:
    conf = _probe("narenas:2").stdout.strip()
    assert conf.endswith(",narenas:2")
    assert POLARS_MALLOC_CONF not in conf


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


def test_glibc_makes_no_more_arenas_than_cores(
    libc: _FakeLibc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    limit_glibc_arenas()
    assert libc.calls == [("mallopt", -8, 2)]  # M_ARENA_MAX


@pytest.mark.parametrize("var", ["MALLOC_ARENA_MAX", "GLIBC_TUNABLES"])
def test_a_user_setting_of_the_arenas_wins(
    libc: _FakeLibc, monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    monkeypatch.setenv(var, "8" if var == "MALLOC_ARENA_MAX" else "glibc.malloc.arena_max=8")
    limit_glibc_arenas()
    assert libc.calls == []


def test_on_this_system_the_arena_limit_is_accepted() -> None:
    libc = _allocator._libc()
    if libc is None:
        pytest.skip("the C library is not glibc: kvdiag leaves malloc alone")
    assert libc.mallopt(-8, os.cpu_count() or 1) == 1  # glibc returns 1 on success
