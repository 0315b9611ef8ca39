"""The engine's own words for what a rule says: setting names, flags, nouns, remedy wording.

Rules reason in kvdiag's canonical terms (gpu_memory_utilization, max_num_seqs, preemptions)
and phrase what they tell the reader through the vocabulary of the engine that ran, so an
SGLang incident reads `--mem-fraction-static`, `--max-running-requests` and "retractions".
A setting's name and flag are the engine's settings table's (kvdiag/domain/engine_settings,
which the ingester and the facts read too); the words, phrases and remedy wording are
vocabulary.toml's. The engine comes from the facts (the folder's engine, or the replica's own
when a folder holds two).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvdiag.analyzer.model.engine import engine_of_replica
from kvdiag.analyzer.model.incident import Incident
from kvdiag.domain.records.diagnosis import Fact
from kvdiag.domain.settings import EngineSettings, engine_settings

DEFAULT_ENGINE = "vllm"  # what the rules said before SGLang, and for inputs naming no engine


@dataclass(frozen=True, slots=True)
class ExplicitPool:
    """A pool size set by the operator: the config key, the flag and its unit."""

    key: str
    flag: str
    unit: str  # "bytes" | "tokens"


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """One engine's words."""

    engine: str
    label: str
    process_words: tuple[str, ...]
    settings: EngineSettings
    words: Mapping[str, str]
    phrases: Mapping[str, str]
    explicit_pool: ExplicitPool

    def name(self, setting: str) -> str:
        """A setting as the engine calls it: max_num_seqs -> max_running_requests."""
        return self.settings.spoken(setting).name

    def flag(self, setting: str, value: object = None) -> str:
        """The engine's flag for a setting, with a value when given: --max-num-seqs 24."""
        flag = self.settings.spoken(setting).flag
        return flag if value is None else f"{flag} {value}"

    def word(self, key: str) -> str:
        return self.words[key]

    def phrase(self, key: str) -> str:
        return self.phrases[key]

    def count(self, n: int, noun: str = "preemption") -> str:
        """`n` of a noun in the engine's word: 1 retraction, 29 preemptions."""
        return f"{n} {self.words[noun if n == 1 else noun + 's']}"


def _table(raw: object) -> dict[str, str]:
    assert isinstance(raw, dict), raw
    return {str(k): str(v) for k, v in raw.items()}


def _load(engine: str, raw: dict[str, object], settings: EngineSettings) -> Vocabulary:
    words = raw["process_words"]
    assert isinstance(words, list), words
    pool = _table(raw["explicit_pool"])
    return Vocabulary(
        engine=engine,
        label=str(raw["label"]),
        process_words=tuple(str(w) for w in words),
        settings=settings,
        words=_table(raw["words"]),
        phrases=_table(raw["phrases"]),
        explicit_pool=ExplicitPool(pool["key"], settings.named(pool["key"]).flag, pool["unit"]),
    )


@cache
def vocabularies() -> dict[str, Vocabulary]:
    """Every engine's vocabulary: vocabulary.toml's words with the engine's settings table."""
    text = _vocabulary_toml()
    raw = tomllib.loads(text)
    tables = engine_settings()
    return {name: _load(name, spec, tables[name]) for name, spec in raw["engines"].items()}


def engine_process_words() -> tuple[str, ...]:
    """Words that mark a process (nvidia-smi, ps) as some engine's own, any engine."""
    return tuple(w for v in vocabularies().values() for w in v.process_words)


def vocabulary(ctx: Incident, replica: str | None = None) -> Vocabulary:
    """The words of the engine that ran (the replica's, when the folder holds several)."""
    engine = engine_of_replica(ctx, ctx.facts, replica or "default")
    return vocabularies().get(engine or DEFAULT_ENGINE, vocabularies()[DEFAULT_ENGINE])


def _vocabulary_toml() -> str:
    package = resources.files("kvdiag.analyzer.model.quantities")
    return package.joinpath("vocabulary.toml").read_text()


@cache
def _fleets() -> dict[str, dict[str, str]]:
    text = _vocabulary_toml()
    raw = tomllib.loads(text).get("fleets", {})
    return {name: _table(spec["phrases"]) for name, spec in raw.items()}


def fleet_phrase(ctx: Incident, key: str) -> str | None:
    """A routing remedy in the words of the framework that routed the fleet (Dynamo's
    router flags), None when no framework did (the folder's replicas were balanced by
    something kvdiag cannot see)."""
    fact = ctx.facts.get("fleet_engine")
    if not isinstance(fact, Fact):
        return None
    return _fleets().get(str(fact.value), {}).get(key)


def two_engines(ctx: Incident, replica: str) -> bool:
    """The replica's evidence comes from more than one engine (a side-by-side comparison)."""
    mixed = isinstance(ctx.facts.get("engine"), tuple)
    return mixed and engine_of_replica(ctx, ctx.facts, replica) is None
