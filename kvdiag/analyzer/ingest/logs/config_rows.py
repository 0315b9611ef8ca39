"""Config rows (key, value, origin) from the events that state configuration.

An event's `config` table maps canonical keys to its fields (vectorised). A `config_dict`
field holds many settings at once: `non-default args: {...}` (a Python dict literal, read
with ast.literal_eval) or a launch command (`vllm serve MODEL --flag value ...`). These are
decoded per matched row; there are a handful per file.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kvdiag.analyzer.ingest.logs.format_pack import Event

CONFIG_COLUMNS = (
    "source_path",
    "source_line",
    "raw",
    "replica",
    "key",
    "value",
    "origin",
    "engine",
)
_SHORT_FLAGS = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "dp": "data_parallel_size",
    "q": "quantization",
}
# vLLM's CLI renamed a few destinations; config keys use the engine's own names.
_FLAG_ALIASES = {"kv_cache_memory": "kv_cache_memory_bytes"}
# vLLM's human_readable_int: lower-case suffixes are decimal, upper-case binary ("32K").
_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])$")
_HUMAN_FACTOR = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_HUMAN_FACTOR |= {k.upper(): 2 ** (10 * (i + 1)) for i, k in enumerate("kmgt")}


def python_text(value: Any) -> str:
    """A value as vLLM prints it: True, None, 0.9, plain strings unquoted."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float) or value is None:
        return str(value)
    return json.dumps(value, default=repr)


def _pydict(text: str) -> dict[str, Any] | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _number(text: str) -> str:
    m = _HUMAN.match(text)
    if m is None:
        return text
    return str(int(float(m.group(1)) * _HUMAN_FACTOR[m.group(2)]))


def argv_settings(command: str) -> dict[str, str]:
    """Settings from `vllm serve MODEL --flag value --bool-flag --no-flag ...`."""
    text = command.replace("\\\n", " ").replace("\n", " ")
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    out: dict[str, str] = {}
    if len(words) > 2 and words[1] == "serve" and not words[2].startswith("-"):
        out["model"] = words[2]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            continue
        name, eq, value = word.lstrip("-").partition("=")
        key = _SHORT_FLAGS.get(name, name.replace("-", "_"))
        if not eq and i < len(words) and not words[i].startswith("-"):
            value, eq, i = words[i], "=", i + 1
        if not eq and key.startswith("no_"):
            key, value = key[3:], "False"
        elif not eq:
            value = "True"
        out[_FLAG_ALIASES.get(key, key)] = _number(value)
    return out


def decode_dicts(rows: pl.DataFrame, event: Event) -> pl.DataFrame:
    """Re-encode a pydict field as JSON (so SQL can read it); argv stays as printed.

    Each distinct text once: a crash loop prints the same `non-default args` at every start.
    """
    name = event.config_dict
    if name is None or event.fields[name] != "pydict":
        return rows
    texts = rows[name].unique().drop_nulls().to_list()
    decoded = [_pydict(t) for t in texts]
    as_json = [json.dumps(d, default=repr) if d is not None else None for d in decoded]
    mapping = pl.DataFrame(
        {name: texts, "_json": as_json}, schema={name: pl.String, "_json": pl.String}
    )
    joined = rows.join(mapping, on=name, how="left", maintain_order="left")
    return joined.with_columns(pl.col("_json").alias(name)).drop("_json")


def config_rows(rows: pl.DataFrame, event: Event) -> pl.DataFrame | None:
    """Config rows stated by one event's matched rows (already shaped with provenance)."""
    parts = [_mapped(rows, event)]
    if event.config_dict is not None:
        parts.append(_from_dict(rows, event))
    frames = [p for p in parts if p is not None and p.height]
    return pl.concat(frames) if frames else None


def _mapped(rows: pl.DataFrame, event: Event) -> pl.DataFrame | None:
    frames = [
        rows.filter(pl.col(field).is_not_null()).select(
            "source_path",
            "source_line",
            "raw",
            "replica",
            pl.lit(key).alias("key"),
            pl.col(field).cast(pl.String).alias("value"),
        )
        for key, field in event.config.items()
        if field in rows.columns
    ]
    if not frames:
        return None
    return pl.concat(frames).with_columns(
        pl.lit("log").alias("origin"), pl.lit("vllm").alias("engine")
    )


def _from_dict(rows: pl.DataFrame, event: Event) -> pl.DataFrame | None:
    name = event.config_dict
    assert name is not None
    argv = event.fields[name] == "argv"
    out: list[dict[str, Any]] = []
    for row in rows.select("source_path", "source_line", "raw", "replica", name).iter_rows(
        named=True
    ):
        text = row.pop(name)
        if text is None:
            continue
        if argv:
            settings = argv_settings(text)
        else:
            settings = {k: python_text(v) for k, v in (json.loads(text) or {}).items()}
        origin = "cmdline" if argv else "log"
        out += [
            row | {"key": k, "value": v, "origin": origin, "engine": "vllm"}
            for k, v in settings.items()
        ]
    if not out:
        return None
    return pl.DataFrame(
        out, schema={c: pl.Int64 if c == "source_line" else pl.String for c in CONFIG_COLUMNS}
    )


_STATEMENT = ("replica", "key", "value", "origin", "engine")


@dataclass
class FirstStatements:
    """Each statement (replica, key, value, origin, engine) of one file once, at its first
    line. A crash loop restates its whole configuration at every start: 22,716 starts made
    380,000 config rows of ~2 KB each (the line's text on every key), most of the time
    spent storing a gigabyte. What reads them needs the first line of each value only
    (facts/first_stated.py); a value that changes between starts is still stored."""

    seen: set[tuple[Any, ...]] = field(default_factory=set)
    pending: list[pl.DataFrame] = field(default_factory=list)
    events_seen: set[tuple[Any, ...]] = field(default_factory=set)

    def new_rows(self, rows: pl.DataFrame, event: Event) -> pl.DataFrame | None:
        """The event rows whose config fields (and replica) no earlier row of the file had:
        a row like an earlier one states the same values later, which never win. A crash
        loop's start-up lines are skipped before their config rows are made (34 polars
        calls an event and batch, 1.3 s of the main thread per 0.25 GB)."""
        fields = [f for f in (*event.config.values(), event.config_dict) if f in rows.columns]
        if not fields:
            return None
        shape = ["replica", *dict.fromkeys(fields)]
        firsts = rows.sort("source_line", maintain_order=True).unique(
            shape, keep="first", maintain_order=True
        )
        keys = [(event.id, *k) for k in firsts.select(shape).iter_rows()]
        fresh = pl.Series([k not in self.events_seen for k in keys], dtype=pl.Boolean)
        self.events_seen.update(keys)
        kept = firsts.filter(fresh)
        return kept if kept.height else None

    def add(self, rows: pl.DataFrame) -> None:
        """Config rows of one event of the batch being read (events come in any order)."""
        self.pending.append(rows)

    def batch(self) -> pl.DataFrame | None:
        """The rows added since the last call whose statement is new to the file: batches
        come in file order, so the earliest line of a batch is the first in the file."""
        if not self.pending:
            return None
        frame = (
            pl.concat(self.pending, how="diagonal_relaxed")
            if len(self.pending) > 1
            else self.pending[0]
        )
        self.pending = []
        firsts = frame.sort("source_line", maintain_order=True).unique(
            _STATEMENT, keep="first", maintain_order=True
        )
        keys = list(firsts.select(_STATEMENT).iter_rows())
        fresh = pl.Series([k not in self.seen for k in keys], dtype=pl.Boolean)
        self.seen.update(keys)
        kept = firsts.filter(fresh)
        return kept if kept.height else None
