"""Format packs: log-line shapes declared as data (TOML), loaded and validated.

A pack declares
- envelope steps: prefixes stripped in order (container stamps, process prefixes, the
  logger header), whose named groups become columns; steps marked `anchor` are the
  engine's own (process prefix, logger header), found even after text a deployment put
  before them (logs/residue.py);
- records: shapes of lines that carry no event but are known (tracebacks, warnings,
  progress bars), so they count as parsed rather than unmatched;
- events: the messages that matter. An event names the store table it fills, a literal
  that every matching line contains (a cheap prefilter), regex variants keyed by the
  first version that printed them, typed fields, optional `extract` patterns (a field
  found anywhere in the message), an optional `join` (the message spans several lines),
  the `config` keys it reports, and sample lines.

The loader rejects unknown keys, fields the table does not declare, and variants without
a sample; `tests/test_formats.py` runs every sample through the real ingester.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import polars as pl

from kvdiag.analyzer.schema import TABLES_BY_NAME
from kvdiag.domain.errors import FormatPackError

# int/float: digits with optional thousands separators; bytes: a size with its unit
# ("1.63 GiB", "0 bytes") as bytes; gib: a size as GiB; count: items of a printed list;
# lower: a word, lower-cased; ratio_pct: a ratio (SGLang's "token usage: 0.94") stored as a
# percentage (94.0); proclist: 'Process N has X memory in use.' clauses as JSON;
# pydict: a Python dict literal (kept as JSON), argv: a shell command line; the entries
# of these two can become config rows (`config_dict`).
FIELD_TYPES = (
    "int",
    "float",
    "ratio_pct",
    "str",
    "lower",
    "bytes",
    "gib",
    "count",
    "proclist",
    "pydict",
    "argv",
)
DICT_TYPES = ("pydict", "argv")
JOIN_MODES = ("same_header", "backslash", "indented")

_PACK_KEYS = {"schema", "name", "description", "envelope", "record", "event"}
_ENVELOPE_KEYS = {"id", "doc", "pattern", "repeat", "record", "anchor", "samples"}
_RECORD_KEYS = {"id", "doc", "pattern", "samples"}
_EVENT_KEYS = {
    "id",
    "doc",
    "table",
    "literal",
    "set",
    "fields",
    "variants",
    "extract",
    "join",
    "join_max",
    "near_miss",
    "sniff",
    "config",
    "config_dict",
    "samples",
}
_SAMPLE_KEYS = {"variant", "line", "expect", "source", "config"}


@dataclass(frozen=True, slots=True)
class Sample:
    """A real line (or lines, newline-separated) the format must parse, and what it yields."""

    line: str
    expect: dict[str, Any]
    variant: str | None
    source: str
    config: dict[str, str]  # config rows the sample must produce (key -> value)


@dataclass(frozen=True, slots=True)
class EnvelopeStep:
    """A prefix stripped from the line before events are matched."""

    id: str
    pattern: str  # anchored at ^; named groups become envelope columns
    repeat: bool  # may occur more than once (stacked process prefixes)
    record: bool  # a line with this prefix is a log record even when no event matches
    anchor: bool  # the engine's own prefix: sought after an unknown prefix too
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class RecordShape:
    """A header-less line shape that is known and carries nothing to extract."""

    id: str
    doc: str
    pattern: str
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
    extract: dict[str, str]  # field -> regex with one group, searched anywhere
    join: str | None  # how following lines continue the message (JOIN_MODES)
    join_max: int  # at most this many continuation lines
    near_miss: bool  # a line with the literal that matches no variant counts as unmatched
    sniff: bool  # a line of this event alone marks a file as this pack's kind
    config: dict[str, str]  # canonical config key -> field that holds its value
    config_dict: str | None  # a pydict/argv field whose entries are config rows
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class FormatPack:
    """A validated pack."""

    name: str
    description: str
    envelope: tuple[EnvelopeStep, ...]
    records: tuple[RecordShape, ...]
    events: tuple[Event, ...]


def _fail(where: str, message: str) -> FormatPackError:
    return FormatPackError(f"{where}: {message}")


def _check_keys(where: str, got: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(got) - allowed)
    if unknown:
        raise _fail(where, f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")


# How far a pack's patterns are checked: compiled in Python and in polars, where they run
# (Rust regex: no look-around, no backreferences), in Python only, or not at all (the
# bundled packs, which tests/test_formats.py checks in full: compiling their ~370 patterns
# for the check alone was ~30 ms of every run; the few a run uses are compiled as used).
Check = Literal["polars", "python", "none"]


def _compile(
    where: str, pattern: str, check: Check, anchored: bool = True
) -> re.Pattern[str] | None:
    """The pattern compiled (None when `check` is "none"), checked as `check` says."""
    if anchored and not pattern.startswith("^"):
        raise _fail(where, f"pattern must be anchored with ^: {pattern!r}")
    if check == "none":
        return None
    try:
        compiled = re.compile(pattern)
        if check == "polars":
            pl.Series([""]).str.contains(pattern)
    except (re.error, pl.exceptions.ComputeError) as exc:
        raise _fail(where, f"bad regex {pattern!r}: {exc}") from None
    return compiled


def _samples(where: str, raw: list[dict[str, Any]]) -> tuple[Sample, ...]:
    out = []
    for i, s in enumerate(raw):
        _check_keys(f"{where}.samples[{i}]", s, _SAMPLE_KEYS)
        if "line" not in s:
            raise _fail(f"{where}.samples[{i}]", "missing 'line'")
        config = {str(k): str(v) for k, v in s.get("config", {}).items()}
        expect = dict(s.get("expect", {}))
        out.append(Sample(s["line"], expect, s.get("variant"), s.get("source", ""), config))
    return tuple(out)


def _envelope(where: str, raw: dict[str, Any], check: Check) -> EnvelopeStep:
    _check_keys(where, raw, _ENVELOPE_KEYS)
    _compile(where, raw["pattern"], check)
    return EnvelopeStep(
        raw["id"],
        raw["pattern"],
        bool(raw.get("repeat", False)),
        bool(raw.get("record", False)),
        bool(raw.get("anchor", False)),
        _samples(where, raw.get("samples", [])),
    )


def _record(where: str, raw: dict[str, Any], check: Check) -> RecordShape:
    _check_keys(where, raw, _RECORD_KEYS)
    _compile(where, raw["pattern"], check)
    samples = _samples(where, raw.get("samples", []))
    if not samples:
        raise _fail(where, f"record {raw['id']!r} has no sample line")
    return RecordShape(raw["id"], raw.get("doc", ""), raw["pattern"], samples)


def _check_fields(where: str, raw: dict[str, Any], table_name: str) -> dict[str, str]:
    table = TABLES_BY_NAME.get(table_name)
    if table is None:
        raise _fail(where, f"unknown table {table_name!r}")
    fields = dict(raw.get("fields", {}))
    for name, ftype in fields.items():
        if ftype not in FIELD_TYPES:
            raise _fail(where, f"field {name!r} has unknown type {ftype!r}; use {FIELD_TYPES}")
    for name in (*fields, *raw.get("set", {})):
        if name not in table.column_names:
            raise _fail(where, f"table {table.name} has no column {name!r}")
    return fields


def _check_extract(
    where: str, extract: dict[str, str], fields: dict[str, str], check: Check
) -> None:
    for name, pattern in extract.items():
        if name not in fields:
            raise _fail(where, f"extract field {name!r} is not in fields")
        compiled = _compile(f"{where}.extract.{name}", pattern, check, anchored=False)
        if compiled is not None and compiled.groups != 1:
            raise _fail(where, f"extract pattern for {name!r} needs exactly one group")


def _check_config(where: str, raw: dict[str, Any], fields: dict[str, str]) -> None:
    settable = set(fields) | set(raw.get("set", {}))
    for key, field in raw.get("config", {}).items():
        if field not in settable:
            raise _fail(where, f"config key {key!r} names {field!r}, which is not a field")
    if (name := raw.get("config_dict")) is not None and fields.get(name) not in DICT_TYPES:
        raise _fail(where, f"config_dict {name!r} must be a field of type {DICT_TYPES}")
    if raw.get("join") is not None and raw["join"] not in JOIN_MODES:
        raise _fail(where, f"join {raw['join']!r} is not one of {JOIN_MODES}")


def _check_samples(where: str, samples: tuple[Sample, ...], variants: list[str]) -> None:
    covered = {s.variant for s in samples}
    if missing := [v for v in variants if v not in covered]:
        raise _fail(where, f"variant(s) {missing} have no sample line")
    if unknown := covered - set(variants):
        raise _fail(where, f"samples name unknown variant(s) {sorted(map(str, unknown))}")


def _event(where: str, raw: dict[str, Any], check: Check) -> Event:
    _check_keys(where, raw, _EVENT_KEYS)
    for key in ("id", "table", "literal", "variants"):
        if key not in raw:
            raise _fail(where, f"missing {key!r}")
    where = f"{where} ({raw['id']})"
    fields = _check_fields(where, raw, raw["table"])
    variants = tuple((str(k), str(v)) for k, v in raw["variants"].items())
    for version, pattern in variants:
        compiled = _compile(f"{where}.variants.{version}", pattern, check)
        groups = set(compiled.groupindex) if compiled is not None else set()
        if extra := groups - set(fields):
            raise _fail(f"{where}.variants.{version}", f"groups {sorted(extra)} are not in fields")
    extract = {str(k): str(v) for k, v in raw.get("extract", {}).items()}
    _check_extract(where, extract, fields, check)
    _check_config(where, raw, fields)
    samples = _samples(where, raw.get("samples", []))
    _check_samples(where, samples, [v for v, _ in variants])
    return Event(
        id=raw["id"],
        doc=raw.get("doc", ""),
        table=raw["table"],
        literal=raw["literal"],
        set=dict(raw.get("set", {})),
        fields=fields,
        variants=variants,
        extract=extract,
        join=raw.get("join"),
        join_max=int(raw.get("join_max", 12)),
        near_miss=bool(raw.get("near_miss", True)),
        sniff=bool(raw.get("sniff", True)),
        config={str(k): str(v) for k, v in raw.get("config", {}).items()},
        config_dict=raw.get("config_dict"),
        samples=samples,
    )


def parse_pack(text: str, where: str, *, check: Check = "polars") -> FormatPack:
    """Parse and validate a pack's TOML text; errors name `where` and the offending key.

    `check`: how far patterns are checked (see Check): "polars" compiles every pattern in
    polars too (Python's re accepts patterns the Rust engine refuses); the bundled packs
    are checked by the tests instead.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(where, f"not valid TOML: {exc}") from None
    _check_keys(where, raw, _PACK_KEYS)
    if raw.get("schema") != 1:
        raise _fail(where, f"unsupported schema {raw.get('schema')!r} (this kvdiag reads 1)")
    envelope = tuple(
        _envelope(f"{where}: envelope[{i}]", e, check)
        for i, e in enumerate(raw.get("envelope", []))
    )
    records = tuple(
        _record(f"{where}: record[{i}]", r, check) for i, r in enumerate(raw.get("record", []))
    )
    events = tuple(
        _event(f"{where}: event[{i}]", e, check) for i, e in enumerate(raw.get("event", []))
    )
    for kind, ids in (("event", [e.id for e in events]), ("record", [r.id for r in records])):
        if dupes := sorted({i for i in ids if ids.count(i) > 1}):
            raise _fail(where, f"duplicate {kind} ids {dupes}")
    return FormatPack(raw["name"], raw.get("description", ""), envelope, records, events)


@cache
def load_pack(name: str) -> FormatPack:
    """A pack bundled with kvdiag, e.g. `load_pack("vllm_log")`.

    Its patterns are not compiled here, which every run would pay for (in polars ~60 ms,
    in Python ~30 ms); tests/test_formats.py checks the bundled packs in full.
    """
    ref = resources.files("kvdiag.analyzer.ingest.logs") / "formats" / f"{name}.toml"
    text = ref.read_text(encoding="utf-8")
    return parse_pack(text, f"formats/{name}.toml", check="none")
