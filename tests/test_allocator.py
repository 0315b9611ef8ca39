"""kvdiag configures polars' jemalloc before polars loads (see kvdiag/_allocator.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvdiag._allocator import POLARS_MALLOC_CONF, POLARS_MALLOC_CONF_VAR

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
