"""Unifying the settings' names changed no config row and no effective setting.

tests/settings_roundtrip.json was written by this module's `snapshot()` with the three tables
kvdiag had before the names moved to kvdiag/domain/engine_settings (launch_flags.toml's flags,
engine_defaults.toml's aliases, vocabulary.toml's names and flags; commit d66b654). It holds:
- for every fixture, the config rows the facts read (launch records, logs, metrics, gauges)
  and each setting's effective value, source and note per replica, and as the rules ask it;
- for every flag spelling the old launch table declared, commands using it (a switch alone
  and with `--no-`; a valued flag with a space, with `=` and underscores, and as a bare
  argument list), and a few mixed commands, with the rows each gave.
The test recomputes all of it with today's code and compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import kvdiag.analyzer.model as facts_package
from kvdiag.analyzer.ingest.config.cmdline import command_settings, words
from kvdiag.analyzer.model.base import Facts
from kvdiag.analyzer.model.effective import EngineContext, effective_value
from kvdiag.analyzer.model.settings import config_rows, engine_context, replicas, setting
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import fixture_cases

SNAPSHOT = Path(__file__).with_name("settings_roundtrip.json")
ROW_COLUMNS = ("source_path", "source_line", "replica", "key", "value", "origin", "engine")
# Canonical keys and engine names, asked of every fixture: what the facts and rules ask,
# and the engines' own names (which resolve to themselves).
KEYS = (
    "num_gpu_blocks",
    "block_size",
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "kv_cache_max_concurrency",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "swap_space",
    "engine_version",
    "device",
    "max_total_tokens",
    "mem_fraction_static",
    "page_size",
    "tp_size",
    "context_length",
    "max_running_requests",
    "chunked_prefill_size",
    "disable_radix_cache",
    "cache_dtype",
    "max_seq_len",
)


def _effective(found: Any) -> list[Any] | None:
    if found is None:
        return None
    row = found.row
    where = None if row is None else [row.get("source_path"), row.get("source_line")]
    return [found.value, found.source, found.note, where]


def _settings_of(reader: StoreReader, facts: Facts) -> dict[str, Any]:
    rows = config_rows(reader)
    out: dict[str, Any] = {
        "rows": [[r.get(c) for c in ROW_COLUMNS] for r in rows],
        "rules": {k: _effective(effective_value(k, rows, EngineContext())) for k in KEYS},
    }
    for replica in replicas(rows, reader):
        ctx = engine_context(reader, rows, replica, facts)
        out[f"replica {replica}"] = {
            "engine": ctx.engine,
            **{k: _effective(setting(k, rows, replica, ctx)) for k in KEYS},
        }
    return out


class _Read(Exception):
    """What a fixture's analysis stated, read once its facts are established."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings


def fixture_settings(name: str, incident: Path) -> dict[str, Any]:
    """Config rows and effective settings of one fixture, read inside its analysis.

    The analysis stops once the facts are established: the rules and charts after them
    read no setting this compares, and are half of an analysis's time.
    """
    establish = facts_package.establish

    def reading(reader: StoreReader) -> Facts:
        raise _Read(_settings_of(reader, establish(reader)))

    facts_package.establish = reading  # the pipeline calls facts.establish(reader)
    try:
        analyze(AnalyzeOptions(incident=incident, label=name))
    except _Read as read:
        return read.settings
    finally:
        facts_package.establish = establish
    raise AssertionError(f"{name}: the analysis established no facts")


def command_rows(command: str) -> list[list[Any]] | None:
    found = command_settings(words([(1, command)]))
    return None if found is None else [[s.key, s.value, s.engine] for s in found]


def snapshot(commands: list[str]) -> dict[str, Any]:
    return {
        "fixtures": {c.name: fixture_settings(c.name, c.incident) for c in fixture_cases()},
        "commands": {c: command_rows(c) for c in commands},
    }


def _before() -> dict[str, Any]:
    before: dict[str, Any] = json.loads(SNAPSHOT.read_text())
    return before


def _jsonable(value: Any) -> Any:
    result: Any = json.loads(json.dumps(value, default=str))
    return result


# The fixtures the snapshot was taken of: a fixture added since has no "before".
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(json.loads(SNAPSHOT.read_text())["fixtures"]))
def test_fixture_config_rows_and_effective_settings_are_unchanged(name: str) -> None:
    (case,) = [c for c in fixture_cases() if c.name == name]
    now = _jsonable(fixture_settings(case.name, case.incident))
    before = _before()["fixtures"][name]
    # The facts read the first statement of each kind only (facts/first_stated.py): the
    # rows are the snapshot's less later statements that never won (in an order that may
    # differ among the rows of one line, which state different keys).
    kept = {_row_key(r) for r in now["rows"]}
    assert _firsts(before["rows"]) <= kept <= {_row_key(r) for r in before["rows"]}
    assert {**now, "rows": None} == {**before, "rows": None}


def _row_key(row: list[Any]) -> tuple[Any, ...]:
    return tuple(json.dumps(v) for v in row)


def _firsts(rows: list[list[Any]]) -> set[tuple[Any, ...]]:
    """Per replica, key, origin, engine and whether the value states anything: the row
    first by (source_path, source_line), the one effective_value can pick."""
    first: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        path, line, replica, key, value, origin, engine = row
        kind = (replica, key, origin, engine, str(value) not in ("", "None", "none", "null"))
        if kind not in first or (str(path), line or 0) < (str(first[kind][0]), first[kind][1] or 0):
            first[kind] = row
    return {_row_key(r) for r in first.values()}


def test_every_old_flag_spelling_gives_the_same_rows() -> None:
    commands = _before()["commands"]
    assert len(commands) > 100
    changed = {c: (rows, command_rows(c)) for c, rows in commands.items()}
    changed = {c: pair for c, pair in changed.items() if _jsonable(pair[1]) != pair[0]}
    assert not changed, changed


if __name__ == "__main__":
    # python -m tests.test_settings_roundtrip: rewrite the snapshot, same commands, after a
    # change to a setting's names that is meant to show in config rows or effective settings.
    fresh = snapshot(list(_before()["commands"]))
    SNAPSHOT.write_text(json.dumps(_jsonable(fresh), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
