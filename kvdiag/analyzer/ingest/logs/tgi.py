"""Text Generation Inference (TGI) logs: the vLLM log machinery run with TGI's format pack.

Reading, repairs, line accounting and the event tables are the vLLM ingester's
(`VllmLogIngester.ingest` with `formats/tgi_log.toml`); this module adds what TGI states
differently:
- the launcher prints its settings as a Rust struct (`Args { model_id: "...", num_shard:
  Some(4), ... }`): every field becomes a config row under TGI's own name, as a TGI launch
  command's flags do; TGI's settings table (kvdiag/domain/engine_settings/tgi.toml) says
  which canonical setting each is (num_shard is tensor_parallel_size, max_total_tokens is
  max_model_len, max_concurrent_requests is the in-flight request cap);
- before 1.0 (0.8 to 0.9.3) max_batch_total_tokens is a bare number, the token budget the
  flash KV cache is allocated for at warm-up: the pool in tokens, so it also becomes a
  log_kv_pool row. From 1.0 it is `Some(N)` or `None`, a request that flash models ignore
  (the router's "Setting max batch total tokens to N" states the pool then);
- configuration rows are TGI's (`engine` "tgi");
- the RFC 3339 UTC stamp that times each line is TGI's own, not a container's.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator

import polars as pl

from kvdiag.analyzer.ingest.base import Account, Emit, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.logs.config_rows import CONFIG_COLUMNS
from kvdiag.analyzer.ingest.logs.engine_log import EngineLogIngester
from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.schema import table

PACK = "tgi_log"
ENGINE = "tgi"
# tracing-subscriber's header with one of TGI's targets: TGI's alone (no other engine logs
# under text_generation_*), in text or --json-output form.
_HEADER = re.compile(
    r"(?m)(?:^|\s)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z +(?:TRACE|DEBUG|INFO|WARN|ERROR) "
    r"(?:\S.*?: )?text_generation_[a-z0-9_]+(?:::\w+)*: "
    r'|"target":"text_generation_[a-z0-9_]+'
)
_ARGS_EVENT = "tgi_launcher_args"
_SOME = re.compile(r"^Some\((.*)\)$", re.DOTALL)
_BARE_INT = re.compile(r"^\d+$")
_OPENERS, _CLOSERS = "([{", ")]}"


class TgiLogIngester(EngineLogIngester):
    """Reads Text Generation Inference logs (launcher, router, relayed shard lines)."""

    kind = "tgi_log"
    description = "Text Generation Inference log (launcher Args, router warm-up and refusals)"
    pack_name = PACK

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        for emit in super().ingest(unit, ctx):
            if isinstance(emit, Account):
                yield dataclasses.replace(emit, notes=tuple(map(_own_stamp, emit.notes)))
            elif not isinstance(emit, TableBatch):
                yield emit
            elif emit.table == "config":
                yield TableBatch("config", emit.frame.with_columns(pl.lit(ENGINE).alias("engine")))
            elif emit.table == "log_engine":
                yield from _launcher_args(emit.frame)
            else:
                yield emit

    @classmethod
    def header(cls) -> re.Pattern[str]:
        return _HEADER


def _own_stamp(note: str) -> str:
    """The shared ingester's notes say "container timestamp" for a zoned stamp; TGI's lines
    carry their own (a docker stamp before it is skipped)."""
    return note.replace("container timestamp", "TGI's own UTC timestamp")


def _launcher_args(rows: pl.DataFrame) -> Iterator[TableBatch]:
    """The Args rows with their fields as JSON, a config row per field the pack's own
    mapping does not state, and the pool of a pre-1.0 launcher."""
    args = rows.filter(pl.col("event") == _ARGS_EVENT)
    if args.is_empty():  # other log_engine events (prefix caching, defaulted settings) only
        yield TableBatch("log_engine", rows)
        return
    decoded = [parse_args(text or "") for text in args["args"].to_list()]
    rows = rows.with_columns(
        pl.when(pl.col("event") == _ARGS_EVENT)
        .then(pl.Series([json.dumps(d) for d in _spread(rows, decoded)], dtype=pl.String))
        .otherwise("args")
        .alias("args")
    )
    yield TableBatch("log_engine", rows)
    config = _config_rows(args, decoded)
    if config.height:
        yield TableBatch("config", config)
    pool = _pool_rows(args, decoded)
    if pool.height:
        yield TableBatch("log_kv_pool", pool)


def _spread(rows: pl.DataFrame, decoded: list[dict[str, str]]) -> list[dict[str, str] | None]:
    """The decoded Args aligned with every row (None for rows of another event)."""
    found = iter(decoded)
    return [next(found) if e == _ARGS_EVENT else None for e in rows["event"].to_list()]


def _config_rows(args: pl.DataFrame, decoded: list[dict[str, str]]) -> pl.DataFrame:
    (event,) = [e for e in load_pack(PACK).events if e.set.get("event") == _ARGS_EVENT]
    stated_by_pack = set(event.config)
    out = []
    for row, fields in zip(args.iter_rows(named=True), decoded, strict=True):
        where = {k: row[k] for k in ("source_path", "source_line", "raw", "replica")}
        for name, value in fields.items():
            if name not in stated_by_pack:
                out.append(where | {"key": name, "value": value, "origin": "log", "engine": ENGINE})
    schema = {c: pl.Int64 if c == "source_line" else pl.String for c in CONFIG_COLUMNS}
    return pl.DataFrame(out, schema=schema)


def _pool_rows(args: pl.DataFrame, decoded: list[dict[str, str]]) -> pl.DataFrame:
    """log_kv_pool rows for launchers whose max_batch_total_tokens is a bare number (< 1.0)."""
    printed = args["args"].fill_null("")
    tokens = printed.str.extract(r"\bmax_batch_total_tokens: (\d+)[,}]?", 1).cast(pl.Int64)
    max_len = [_bare_int(d.get("max_total_tokens")) for d in decoded]
    frame = args.with_columns(
        tokens.alias("tokens"),
        pl.Series("max_model_len", max_len, pl.Int64),
        pl.lit("tgi_launcher_max_batch_total_tokens").alias("event"),
    ).filter(pl.col("tokens").is_not_null())
    columns = table("log_kv_pool").column_names
    return frame.select([c for c in columns if c in frame.columns])


def _bare_int(value: str | None) -> int | None:
    return int(value) if value is not None and _BARE_INT.match(value) else None


def parse_args(text: str) -> dict[str, str]:
    """The fields of a Rust `{:?}` struct body (`model_id: "m", num_shard: Some(4), ...`),
    values as kvdiag stores settings: `Some(x)` is x, strings unquoted, None stays "None".

    A body copied out of --json-output keeps its JSON escapes (`\\"`); they are undone first.
    """
    if '\\"' in text:
        try:
            text = json.loads(f'"{text}"')
        except json.JSONDecodeError:
            text = text.replace('\\"', '"')
    fields: dict[str, str] = {}
    for part in _top_level(text):
        name, sep, value = part.partition(": ")
        if sep and re.fullmatch(r"\w+", name.strip()):
            fields[name.strip()] = _value(value.strip())
    return fields


def _top_level(text: str) -> list[str]:
    """`text` split at the commas outside quotes and brackets."""
    parts, depth, start, quoted, escaped = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if quoted:
            escaped, quoted = (not escaped and ch == "\\"), quoted and (escaped or ch != '"')
        elif ch == '"':
            quoted = True
        elif ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS:
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _value(text: str) -> str:
    some = _SOME.match(text)
    if some is not None:  # pretty-printed (2.1+), the value has its own line and a comma
        return _value(some.group(1).strip().rstrip(",").strip())
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text
