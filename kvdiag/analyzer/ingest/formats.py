"""Format packs: log-line shapes declared as data (TOML), loaded and validated.

A pack declares envelope steps (prefixes stripped in order) and events. An event names
the store table it fills, a literal that every matching line contains (a cheap prefilter),
its regex variants keyed by the first version that printed them, typed fields, and sample
lines. The loader rejects unknown keys, fields the table does not declare, and variants
without a sample; `tests/test_formats.py` runs every sample through the real ingester.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kvdiag.analyzer.errors import FormatPackError
from kvdiag.analyzer.schema import TABLES_BY_NAME

FIELD_TYPES = ("int", "float", "str")

_PACK_KEYS = {"schema", "name", "description", "envelope", "event"}
_ENVELOPE_KEYS = {"id", "doc", "pattern", "repeat", "record", "samples"}
_EVENT_KEYS = {"id", "doc", "table", "literal", "set", "fields", "variants", "samples"}
_SAMPLE_KEYS = {"variant", "line", "expect", "source"}


@dataclass(frozen=True, slots=True)
class Sample:
    """A real line the format must parse, and what it must yield."""

    line: str
    expect: dict[str, Any]
    variant: str | None
    source: str


@dataclass(frozen=True, slots=True)
class EnvelopeStep:
    """A prefix stripped from the line before events are matched."""

    id: str
    pattern: str  # anchored at ^; named groups become envelope columns
    repeat: bool  # may occur more than once (stacked process prefixes)
    record: bool  # a line with this prefix is a log record even when no event matches
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class Event:
    """One kind of message, with its variants across versions."""

    id: str
    doc: str
    table: str
    literal: str
    set: dict[str, Any]
    fields: dict[str, str]
    variants: tuple[tuple[str, str], ...]  # (first version, regex), tried in order
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class FormatPack:
    """A validated pack."""

    name: str
    description: str
    envelope: tuple[EnvelopeStep, ...]
    events: tuple[Event, ...]


def _fail(where: str, message: str) -> FormatPackError:
    return FormatPackError(f"{where}: {message}")


def _check_keys(where: str, got: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(got) - allowed)
    if unknown:
        raise _fail(where, f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def _compile(where: str, pattern: str) -> None:
    if not pattern.startswith("^"):
        raise _fail(where, f"pattern must be anchored with ^: {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _fail(where, f"bad regex {pattern!r}: {exc}") from None


def _samples(where: str, raw: list[dict[str, Any]]) -> tuple[Sample, ...]:
    out = []
    for i, s in enumerate(raw):
        _check_keys(f"{where}.samples[{i}]", s, _SAMPLE_KEYS)
        if "line" not in s:
            raise _fail(f"{where}.samples[{i}]", "missing 'line'")
        expect = dict(s.get("expect", {}))
        out.append(Sample(s["line"], expect, s.get("variant"), s.get("source", "")))
    return tuple(out)


def _envelope(where: str, raw: dict[str, Any]) -> EnvelopeStep:
    _check_keys(where, raw, _ENVELOPE_KEYS)
    _compile(where, raw["pattern"])
    return EnvelopeStep(
        raw["id"],
        raw["pattern"],
        bool(raw.get("repeat", False)),
        bool(raw.get("record", False)),
        _samples(where, raw.get("samples", [])),
    )


def _event(where: str, raw: dict[str, Any]) -> Event:
    _check_keys(where, raw, _EVENT_KEYS)
    for key in ("id", "table", "literal", "variants"):
        if key not in raw:
            raise _fail(where, f"missing {key!r}")
    where = f"{where} ({raw['id']})"
    table = TABLES_BY_NAME.get(raw["table"])
    if table is None:
        raise _fail(where, f"unknown table {raw['table']!r}")
    fields = dict(raw.get("fields", {}))
    setters = dict(raw.get("set", {}))
    for name, ftype in fields.items():
        if ftype not in FIELD_TYPES:
            raise _fail(where, f"field {name!r} has unknown type {ftype!r}; use {FIELD_TYPES}")
    for name in (*fields, *setters):
        if name not in table.column_names:
            raise _fail(where, f"table {table.name} has no column {name!r}")
    variants = tuple((str(k), str(v)) for k, v in raw["variants"].items())
    for version, pattern in variants:
        _compile(f"{where}.variants.{version}", pattern)
        groups = set(re.compile(pattern).groupindex)
        if extra := groups - set(fields):
            raise _fail(f"{where}.variants.{version}", f"groups {sorted(extra)} are not in fields")
    samples = _samples(where, raw.get("samples", []))
    covered = {s.variant for s in samples}
    if missing := [v for v, _ in variants if v not in covered]:
        raise _fail(where, f"variant(s) {missing} have no sample line")
    if unknown := covered - {v for v, _ in variants}:
        raise _fail(where, f"samples name unknown variant(s) {sorted(map(str, unknown))}")
    return Event(
        raw["id"],
        raw.get("doc", ""),
        table.name,
        raw["literal"],
        setters,
        fields,
        variants,
        samples,
    )


def parse_pack(text: str, where: str) -> FormatPack:
    """Parse and validate a pack's TOML text; errors name `where` and the offending key."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(where, f"not valid TOML: {exc}") from None
    _check_keys(where, raw, _PACK_KEYS)
    if raw.get("schema") != 1:
        raise _fail(where, f"unsupported schema {raw.get('schema')!r} (this kvdiag reads 1)")
    envelope = tuple(
        _envelope(f"{where}: envelope[{i}]", e) for i, e in enumerate(raw.get("envelope", []))
    )
    events = tuple(_event(f"{where}: event[{i}]", e) for i, e in enumerate(raw.get("event", [])))
    ids = [e.id for e in events]
    if dupes := sorted({i for i in ids if ids.count(i) > 1}):
        raise _fail(where, f"duplicate event ids {dupes}")
    return FormatPack(raw["name"], raw.get("description", ""), envelope, events)


@cache
def load_pack(name: str) -> FormatPack:
    """A pack bundled with kvdiag, e.g. `load_pack("vllm_log")`."""
    ref = resources.files("kvdiag.analyzer.ingest") / "formats" / f"{name}.toml"
    return parse_pack(ref.read_text(encoding="utf-8"), f"formats/{name}.toml")
