"""Server command lines: shell words with their line, the engine they start, its flags.

`vllm serve MODEL --max-model-len 4096 ...`, `python -m vllm.entrypoints.openai.api_server
--model ...`, `python -m sglang.launch_server --model-path ...`, with `env A=B` or `A=B`
assignments before them and `\\` continuations. Which flag sets which setting, and its
type, is the engines' settings table (kvdiag/domain/engine_settings); flags it does not list
are kept under their own name. How a command names its engine, and the environment variables
worth keeping, are launch_flags.toml's.
"""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvdiag.domain.settings import (
    EngineSetting,
    EngineSettings,
    engine_settings,
    flag_word,
    normalise,
)

Word = tuple[str, int]  # a shell word and the 1-based line it stands on

_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.S)
_SHELL_STOP = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>&1", "|&"}
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


@dataclass(frozen=True, slots=True)
class Setting:
    """One value a launch record states: config key, value as text, engine, line."""

    key: str
    value: str
    engine: str | None
    line: int


@dataclass(frozen=True, slots=True)
class LaunchTable:
    commands: dict[str, tuple[str, ...]]  # engine -> how a command line starts it
    env: frozenset[str]  # environment variables worth keeping


@cache
def launch_table() -> LaunchTable:
    """launch_flags.toml, loaded once."""
    raw = tomllib.loads(
        resources.files("kvdiag.analyzer.ingest.config").joinpath("launch_flags.toml").read_text()
    )
    return LaunchTable({e: tuple(v) for e, v in raw["commands"].items()}, frozenset(raw["env"]))


def words(lines: list[tuple[int, str]]) -> list[Word]:
    """Shell words of numbered lines; a quote left open joins the next lines to it."""
    out: list[Word] = []
    pending: list[str] = []
    start = 0
    for line_no, text in lines:
        if not pending:
            start = line_no
        stripped = text.rstrip()
        pending.append(stripped[:-1] if stripped.endswith("\\") else text)
        try:
            split = shlex.split("\n".join(pending), comments=False, posix=True)
        except ValueError:
            continue  # unbalanced quote: the word goes on on the next line
        out += [(w, start) for w in split]
        pending = []
    if pending:
        out += [(w, start) for w in " ".join(pending).split()]
    return out


def find_engine(ws: list[Word]) -> tuple[str, int] | None:
    """(engine, index of its first argument) when the words start a known server."""
    plain = [w.rsplit("/", 1)[-1] for w, _ in ws]
    for i, program in enumerate(plain):  # a program whose flags follow it (TGI's launcher)
        for engine, forms in launch_table().commands.items():
            if program.split(":")[0] in forms:  # a docker image's tag aside
                return engine, i + 1
    for i in range(len(plain) - 1):
        pair = f"{plain[i]} {ws[i + 1][0]}"
        for engine, forms in launch_table().commands.items():
            if pair in forms or (
                plain[i].endswith(".py") and engine in plain[i] and ws[i + 1][0] == "serve"
            ):
                return engine, i + 2
    return None


def env_settings(ws: list[Word], engine: str | None) -> list[Setting]:
    """Assignments before the program (`env A=B`, `A=B cmd`) that launch_flags.toml keeps."""
    keep = launch_table().env
    out = []
    for word, line in ws:
        m = _ASSIGN.match(word)
        if m and m["name"] in keep:
            out.append(Setting(m["name"], m["value"], engine, line))
    return out


def flag_settings(ws: list[Word], engine: str) -> list[Setting]:
    """Settings of the arguments `ws` (everything after the program) for `engine`."""
    table = engine_settings().get(engine)
    positional = table.positional() if table is not None else None
    out: list[Setting] = []
    i = 0
    while i < len(ws):
        word, line = ws[i]
        if word in _SHELL_STOP or word.startswith((">", "2>")):
            break
        i += 1
        if not word.startswith("-") or _NUMBER.match(word):
            if positional and not any(s.key == positional.name for s in out):
                out.append(Setting(positional.name, word, engine, line))
            continue
        name, eq, value = word.partition("=")
        spec, negated = _flag(table, name)
        if spec is not None and spec.is_switch:
            out.append(Setting(spec.name, "False" if negated else "True", engine, line))
            continue
        if not eq and i < len(ws) and (not ws[i][0].startswith("-") or _NUMBER.match(ws[i][0])):
            value, eq = ws[i][0], "="
            i += 1
        if spec is None:
            key = flag_word(name).replace("-", "_")
            out.append(Setting(key, value if eq else "True", engine, line))
        else:
            out.append(Setting(spec.name, normalise(spec, value), engine, line))
    return out


def _flag(table: EngineSettings | None, name: str) -> tuple[EngineSetting | None, bool]:
    """(the setting a flag sets, whether it is its `--no-` form); (None, False) when unknown."""
    if table is None:
        return None, False
    spec = table.by_flag(name)
    word = flag_word(name)
    if spec is None and word.startswith("no-"):
        negated = table.by_flag(word[3:])
        if negated is not None:
            return negated, True
    return spec, False


def command_settings(ws: list[Word]) -> list[Setting] | None:
    """Everything one command states, or None when it starts no known server.

    A bare argument list (`--max-model-len 4096 ...`, an args file) is read with the
    flag table that recognises more of its flags.
    """
    found = find_engine(ws)
    if found is not None:
        engine, at = found
        return env_settings(ws[:at], engine) + flag_settings(ws[at:], engine)
    if not ws or not ws[0][0].startswith("--"):
        return None
    names = [flag_word(w.split("=")[0]) for w, _ in ws if w.startswith("-")]
    known = {e: t.flag_words() for e, t in engine_settings().items()}
    scores = {e: sum(n in flags for n in names) for e, flags in known.items()}
    engine = max(scores, key=lambda e: scores[e])  # a tie goes to the first engine (vLLM)
    return flag_settings(ws, engine) if scores[engine] else None


def non_default_args(message: str) -> list[tuple[str, str]]:
    """(key, value) pairs of vLLM's `non-default args: {...}` log message, values as text.

    The dict is printed with repr() and its keys are EngineArgs field names, which are the
    config table's keys already (max_model_len, kv_cache_memory_bytes ...). For the log
    ingester to store as config rows of origin "log".
    """
    start = message.find("{")
    try:
        args = ast.literal_eval(message[start:]) if start >= 0 else None
    except (ValueError, SyntaxError):
        return []
    if not isinstance(args, dict):
        return []
    return [(str(k), v if isinstance(v, str) else repr(v)) for k, v in args.items()]
