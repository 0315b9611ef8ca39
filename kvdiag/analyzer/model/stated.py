"""Every setting a run stated (or defaulted), by canonical key, with where it was read.

The values are the analysis's own (analyzer/model/settings.py): the best source per key,
metrics over the engine's log over the launch flags, else the engine's documented default.
An engine's own names (cache_config_info's `cache_dtype`, SGLang's `tp_size`) are read as
the canonical key, so a run logged by /metrics and one launched with flags compare.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from kvdiag.analyzer.model.effective import Effective
from kvdiag.analyzer.model.reads import Reads
from kvdiag.analyzer.model.settings import (
    SETTING_FACTS,
    config_rows,
    engine_context,
    replicas,
    setting,
)
from kvdiag.domain.records.diagnosis import Fact
from kvdiag.domain.settings import engine_settings

# Where a run listened and what it was called change between any two runs and say nothing
# about capacity; kvdiag's own bookkeeping keys start with "_".
NOT_SETTINGS = frozenset({"host", "port", "engine", "model_tag", "served_model_name"})
# Stated by gpu_snapshots / the model rather than the config table.
_CARD = ("gpu_name", "gpu_memory_total_mib", "gpu_count")


@dataclass(frozen=True, slots=True)
class Stated:
    value: str
    source: str  # "server.log:16", "launch.txt:3", "default for vLLM 0.32"
    flag: str | None  # the engine's flag for the key, when it has one


@cache
def _canonical_names() -> dict[str, str]:
    """An engine's name for a setting -> kvdiag's canonical key."""
    out: dict[str, str] = {}
    for table in engine_settings().values():
        for s in table.settings:
            for name in (s.name, *s.names):
                out.setdefault(name, s.key)
    return out


@cache
def _flags() -> dict[tuple[str, str], str]:
    """(engine, canonical key) -> the flag the engine takes for it."""
    return {
        (t.engine, s.key): s.flags[0]
        for t in engine_settings().values()
        for s in t.settings
        if s.flags
    }


def _source(found: Effective) -> str:
    if found.row is None:
        return found.source
    path, line = found.row.get("source_path"), found.row.get("source_line")
    return f"{path}:{line}" if line is not None else str(path)


def stated_settings(
    reader: Reads, facts: Mapping[str, Fact | tuple[Fact, ...]]
) -> dict[str, Stated]:
    """The run's settings: every key its config rows name, and the capacity keys kvdiag
    knows defaults for. One replica's view: the first named (a fleet's replicas share
    their launch in the runs kvdiag compares; the fleet table says when they do not)."""
    rows = config_rows(reader)
    replica = replicas(rows, reader)[0]
    ctx = engine_context(reader, rows, replica, dict(facts))
    names = _canonical_names()
    keys = {names.get(str(r["key"]), str(r["key"])) for r in rows}
    keys |= {key for _, key, _, _ in SETTING_FACTS}
    out: dict[str, Stated] = {}
    for key in sorted(k for k in keys if k not in NOT_SETTINGS and not k.startswith("_")):
        found = setting(key, rows, replica, ctx)
        if found is not None:
            flag = _flags().get((ctx.engine, key))
            out[key] = Stated(found.value, _source(found), flag)
    out |= _card(reader)
    return out


def _card(reader: Reads) -> dict[str, Stated]:
    row = reader.sql(
        "SELECT min(name) AS name, max(memory_total_mib) AS mib, count(DISTINCT gpu) AS n, "
        "min(source_path) AS path FROM gpu_snapshots"
    ).row(0, named=True)
    if not row["n"]:
        return {}
    values = (row["name"], row["mib"], row["n"])
    return {
        key: Stated(str(value), str(row["path"]), None)
        for key, value in zip(_CARD, values, strict=True)
        if value is not None
    }
