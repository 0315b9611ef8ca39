"""The value a setting had, and where that is known from, or the version's default.

Sources rank by how close they are to what actually ran: `metrics` (cache_config_info is
the engine's resolved CacheConfig), then `log` (the engine's own config line), then
`cmdline` (what was asked for at launch), then the engine's documented default for its
version (engine_defaults.toml), reported as "default for vLLM 0.32". Values "None" and ""
count as not stated. Names differ between sources (cache_config_info's `cache_dtype` is
the flag's `kv_cache_dtype`; SGLang's `tp_size` is `tensor_parallel_size`): the engines'
settings tables (kvdiag/domain/engine_settings) map them onto one canonical key.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kvdiag.domain.settings import EngineSetting, aliases, engine_settings

SOURCE_RANK = {"metrics": 0, "log": 1, "cmdline": 2}
_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI"}
_UNSTATED = {"", "None", "none", "null"}


@dataclass(frozen=True, slots=True)
class Default:
    engine: str
    key: str
    value: str
    doc: str
    conditions: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class EngineContext:
    """What the defaults may depend on. Unknown fields make conditional defaults inapplicable."""

    engine: str = "vllm"
    version: str | None = None
    device: str | None = None  # "cuda" | "cpu"
    gpu_total_gib: float | None = None
    gpu_name: str | None = None
    tp: int | None = None


@dataclass(frozen=True, slots=True)
class Effective:
    """A setting's value and its source: "metrics", "log", "cmdline" or "default for ..."."""

    key: str
    value: str
    source: str
    row: Mapping[str, Any] | None = None  # the config row it was read from (not for defaults)
    note: str | None = None

    @property
    def is_default(self) -> bool:
        return self.row is None


@cache
def engine_defaults() -> tuple[Default, ...]:
    """engine_defaults.toml, loaded once."""
    text = resources.files("kvdiag.analyzer.model").joinpath("engine_defaults.toml").read_text()
    fixed = {"engine", "key", "value", "doc"}
    return tuple(
        Default(
            d["engine"],
            d["key"],
            d["value"],
            d["doc"],
            {k: v for k, v in d.items() if k not in fixed},
        )
        for d in tomllib.loads(text)["default"]
    )


def version_key(version: str) -> tuple[int, ...]:
    """Numeric release parts: "v0.6.4.post1" -> (0, 6, 4); "0.20.2rc1" -> (0, 20, 2)."""
    parts = []
    for piece in version.strip().lstrip("vV").split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() < len(piece):
            break
    return tuple(parts)


def _holds(cond: Mapping[str, Any], ctx: EngineContext) -> bool:
    """Whether every condition of a default holds; unknown inputs make it not hold."""
    checks = {
        "since": lambda v: ctx.version is not None and version_key(ctx.version) >= version_key(v),
        "before": lambda v: ctx.version is not None and version_key(ctx.version) < version_key(v),
        "device": lambda v: ctx.device == v,
        "min_gpu_gib": lambda v: ctx.gpu_total_gib is not None and ctx.gpu_total_gib >= v,
        "below_gpu_gib": lambda v: ctx.gpu_total_gib is not None and ctx.gpu_total_gib < v,
        "gpu_name_has": lambda v: ctx.gpu_name is not None and v in ctx.gpu_name,
        "gpu_name_lacks": lambda v: ctx.gpu_name is not None and v not in ctx.gpu_name,
        "min_tp": lambda v: ctx.tp is not None and ctx.tp >= v,
        "below_tp": lambda v: ctx.tp is not None and ctx.tp < v,
    }
    return all(checks[name](value) for name, value in cond.items())


def default_value(key: str, ctx: EngineContext) -> Effective | None:
    """The engine's default for `key` in this context, or None when kvdiag does not know it.

    Defaults are listed under the engine's own name for the setting (SGLang's
    mem_fraction_static is its gpu_memory_utilization), found through its settings table.
    """
    names = {key} | {a.name for a in aliases(key) if a.setting.engine == ctx.engine}
    for d in engine_defaults():
        if d.engine == ctx.engine and d.key in names and _holds(d.conditions, ctx):
            label = _ENGINE_NAMES.get(ctx.engine, ctx.engine)
            where = f" {ctx.version}" if ctx.version else ""
            return Effective(key, d.value, f"default for {label}{where}", None, d.doc)
    return None


def _renamed(name: str, engine: Any) -> bool:
    """The row's engine calls another setting by this canonical key's name (TGI's
    max_total_tokens is max_model_len, not SGLang's pool): its row is that setting's. An
    engine's own name that is no canonical key (mem_fraction_static) still states itself."""
    table = engine_settings().get(str(engine)) if engine is not None else None
    if table is None or name not in _canonical_keys():
        return False
    try:
        return table.named(name).key != name
    except KeyError:
        return False


@cache
def _canonical_keys() -> frozenset[str]:
    return frozenset(s.key for t in engine_settings().values() for s in t.settings)


def _candidates(key: str, rows: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], str]]:
    """(row, value) pairs stating `key` under its own name or an engine's (its value read as
    the key's: inverted, or a size read as on or off)."""
    named: dict[str, list[EngineSetting]] = {}
    for alias in aliases(key):
        named.setdefault(alias.name, []).append(alias.setting)
    out = []
    for row in rows:
        name, value = str(row.get("key")), str(row.get("value"))
        if value in _UNSTATED:
            continue
        engine = row.get("engine")
        if name == key and not _renamed(name, engine):
            out.append((row, value))
            continue
        spoken = [s for s in named.get(name, ()) if engine is None or s.engine == engine]
        if spoken:
            out.append((row, spoken[0].canonical_value(value)))
    return out


def effective_value(
    key: str, rows: Iterable[Mapping[str, Any]], ctx: EngineContext
) -> Effective | None:
    """The value of `key` in effect, from the best source; else the default; else None.

    `rows` are config-table rows (key, value, origin, source_path, source_line ...).
    """
    found = _candidates(key, rows)
    ranked = sorted(
        (r for r in found if r[0].get("origin") in SOURCE_RANK),
        key=lambda r: (
            SOURCE_RANK[str(r[0]["origin"])],
            str(r[0].get("source_path")),
            r[0].get("source_line") or 0,
        ),
    )
    if ranked:
        row, value = ranked[0]
        note = None if row.get("key") == key else f"stated as {row.get('key')}"
        return Effective(key, value, str(row["origin"]), row, note)
    return default_value(key, ctx)
