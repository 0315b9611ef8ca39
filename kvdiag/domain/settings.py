"""Each engine's names for its settings: the one table the ingester, facts and rules share.

A setting has a canonical key (what facts and rules ask for: gpu_memory_utilization), and
each engine its own name for it (SGLang's mem_fraction_static), its launch flags, the other
names it is printed under (cache_config_info's cache_dtype), a gauge stating it, and how its
value reads as the canonical one (SGLang's disable_radix_cache is the opposite of
enable_prefix_caching). The tables are data, one per engine (engine_settings/*.toml); this
module reads them and answers the three questions asked of them: which setting a flag sets,
which names state a canonical key, and what an engine calls a setting.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

# Engines with a table, in the order a bare argument list that fits several is read as.
ENGINES = ("vllm", "sglang", "trtllm", "tgi")
TYPES = frozenset({"float", "int", "human_int", "str", "bool", "true"})
SWITCH_TYPES = frozenset({"bool", "true"})
_SWITCH_TEXT = {"1": "True", "true": "True", "0": "False", "false": "False"}
_FIELDS = frozenset(
    {"key", "flags", "type", "positional", "names", "metric", "invert", "off", "stands_in_for"}
)


@dataclass(frozen=True, slots=True)
class EngineSetting:
    """One setting of one engine, under the engine's own name."""

    engine: str
    name: str  # the engine's name: what its flag stores and its config dumps print
    key: str  # kvdiag's canonical key
    type: str  # how a flag's value is normalised (engine_settings/vllm.toml's header)
    flags: tuple[str, ...] = ()  # as the engine spells them; the first is the one printed
    positional: bool = False
    names: tuple[str, ...] = ()  # other names it is printed under
    metric: str | None = None
    invert: bool = False
    off: str | None = None
    stands_in_for: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """The flag kvdiag prints for it: --mem-fraction-static."""
        if not self.flags:
            raise KeyError(f"{self.engine} sets {self.name} with no flag")
        return self.flags[0]

    @property
    def is_switch(self) -> bool:
        return self.type in SWITCH_TYPES

    def canonical_value(self, value: str) -> str:
        """The value as the canonical key reads it: a switch inverted, a size as on or off."""
        if self.is_switch:  # as the engine printed it: TGI's PREFIX_CACHING is 1 or 0
            value = _SWITCH_TEXT.get(value.lower(), value)
        if self.invert:
            value = {"True": "False", "False": "True"}.get(value, value)
        if self.off is not None:
            value = str(value != self.off)
        return value


def flag_word(spelling: str) -> str:
    """A flag as launchers match it: no leading dashes, `_` for `-` ("--max_model_len" ->
    "max-model-len")."""
    return spelling.lstrip("-").replace("_", "-")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """One engine's table."""

    engine: str
    settings: tuple[EngineSetting, ...]
    _by_flag: dict[str, EngineSetting] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_name: dict[str, EngineSetting] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for s in self.settings:
            _add(self._by_name, s.name, s)
            for flag in s.flags:
                _add(self._by_flag, flag_word(flag), s)

    def by_flag(self, spelling: str) -> EngineSetting | None:
        """The setting a flag sets, however it is dashed: "-tp", "--max_model_len"."""
        return self._by_flag.get(flag_word(spelling))

    def flag_words(self) -> frozenset[str]:
        """Every flag the table knows, as flag_word() writes it."""
        return frozenset(self._by_flag)

    def named(self, name: str) -> EngineSetting:
        """The setting of this engine's own name: max_total_tokens."""
        return self._by_name[name]

    def positional(self) -> EngineSetting | None:
        """The setting the word after the program sets (`vllm serve MODEL`)."""
        return next((s for s in self.settings if s.positional), None)

    def spoken(self, key: str) -> EngineSetting:
        """What the engine says for a canonical key: its setting of that key, else the one
        standing in for it (SGLang's chunked_prefill_size for max_num_batched_tokens)."""
        same = [s for s in self.settings if s.key == key]
        near = [s for s in self.settings if key in s.stands_in_for]
        if not same and not near:
            raise KeyError(f"{self.engine} has no setting for {key}")
        return (same or near)[0]


def _add(table: dict[str, EngineSetting], word: str, setting: EngineSetting) -> None:
    if word in table:
        raise ValueError(
            f"{setting.engine}: {word} names both {table[word].name} and {setting.name}"
        )
    table[word] = setting


def _setting(engine: str, name: str, raw: Mapping[str, Any]) -> EngineSetting:
    unknown = set(raw) - _FIELDS
    if unknown or raw.get("type") not in TYPES:
        raise ValueError(f"{engine}.{name}: fields {sorted(unknown)}, type {raw.get('type')!r}")
    return EngineSetting(
        engine=engine,
        name=name,
        key=str(raw.get("key", name)),
        type=str(raw["type"]),
        flags=tuple(raw.get("flags", ())),
        positional=bool(raw.get("positional", False)),
        names=tuple(raw.get("names", ())),
        metric=raw.get("metric"),
        invert=bool(raw.get("invert", False)),
        off=raw.get("off"),
        stands_in_for=tuple(raw.get("stands_in_for", ())),
    )


def _load(engine: str) -> EngineSettings:
    text = resources.files("kvdiag.domain").joinpath(f"engine_settings/{engine}.toml").read_text()
    raw = tomllib.loads(text)
    settings = tuple(_setting(engine, name, spec) for name, spec in raw["settings"].items())
    keys = [s.key for s in settings]
    if len(set(keys)) != len(keys):  # spoken() answers one setting per key
        raise ValueError(f"{engine}: two settings of one key in {sorted(keys)}")
    return EngineSettings(engine, settings)


@cache
def engine_settings() -> dict[str, EngineSettings]:
    """Every engine's table, in ENGINES order."""
    return {engine: _load(engine) for engine in ENGINES}


@dataclass(frozen=True, slots=True)
class Alias:
    """A name other than the canonical key that one engine states the key under."""

    name: str
    setting: EngineSetting


@cache
def aliases(key: str) -> tuple[Alias, ...]:
    """Every engine's names for canonical `key` other than the key itself, engines in order."""
    out = []
    for table in engine_settings().values():
        for s in table.settings:
            if s.key == key:
                out += [Alias(n, s) for n in (s.name, *s.names) if n != key]
    return tuple(out)


def setting_metrics() -> dict[str, EngineSetting]:
    """Gauges that state a setting, by metric name (SGLang's context_len)."""
    return {
        s.metric: s for t in engine_settings().values() for s in t.settings if s.metric is not None
    }


# A setting's value in its normal form: what the config table stores, what `compare` and
# `plan` compare a flag's value with (one spelling for "17M", "17825792" and 17825792).
_HUMAN_INT = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<suffix>[kKmMgGtT]?)$")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(text: str) -> int:
    """vLLM's human_readable_int: "17M" = 17 x 2**20, "25.6k" = 25,600, "4096" = 4096."""
    m = _HUMAN_INT.match(text.strip())
    if not m:
        raise ValueError(f"not a human-readable integer: {text!r}")
    num, suffix = m["num"], m["suffix"]
    if suffix in _DECIMAL:
        return int(float(num) * _DECIMAL[suffix])
    if "." in num:
        raise ValueError(f"decimals need a decimal (lowercase) suffix: {text!r}")
    return int(num) * _BINARY.get(suffix, 1)


_CONVERT: dict[str, Any] = {
    "float": lambda v: repr(float(v)),
    "int": lambda v: str(int(v)),
    "human_int": lambda v: str(human_int(v)),
    "str": str,
}


def normalise(spec: EngineSetting, value: str) -> str:
    """The value as the config table stores it; as written when it does not convert."""
    try:
        return str(_CONVERT.get(spec.type, str)(value))
    except ValueError:
        return value
