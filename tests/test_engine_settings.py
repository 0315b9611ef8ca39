"""The engines' settings tables (kvdiag/domain/engine_settings): one home for a setting's names.

What the rules name, what the launch ingester reads and what the facts resolve all go through
them, they agree with what the engines themselves print in the real fixtures, and no other
table in kvdiag/ declares a flag or an alias again.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvdiag.analyzer.ingest.config.cmdline import command_settings, non_default_args, words
from kvdiag.analyzer.ingest.logs.config_rows import python_text
from kvdiag.analyzer.model.effective import EngineContext, effective_value
from kvdiag.analyzer.model.quantities.vocabulary import vocabularies
from kvdiag.domain.settings import (
    EngineSetting,
    EngineSettings,
    _setting,
    aliases,
    engine_settings,
)
from tests.conftest import FIXTURES, fixture_cases
from tests.ingest_helpers import ingest

PKG = Path(__file__).resolve().parents[1] / "kvdiag"
TABLES = PKG / "domain" / "engine_settings"
PROGRAMS = {
    "vllm": "vllm serve M",
    "sglang": "python -m sglang.launch_server",
    "tgi": "text-generation-launcher",
}
SAMPLE_VALUES = {"float": ("0.5", "0.5"), "int": ("7", "7"), "str": ("x/y", "x/y")}
SAMPLE_VALUES["human_int"] = ("2K", "2048")


def _named_in_rules() -> set[tuple[str, str]]:
    """(method, setting) of every vocabulary .name("...") / .flag("...") call in kvdiag/rules."""
    found = set()
    for path in (PKG / "rules").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("name", "flag")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add((node.func.attr, node.args[0].value))
    return found


def test_every_setting_a_rule_names_resolves_through_each_engines_table() -> None:
    named = _named_in_rules()
    assert ("flag", "max_num_seqs") in named and ("name", "gpu_memory_utilization") in named
    for engine, words_of in vocabularies().items():
        table = engine_settings()[engine]
        for method, setting in named:
            said = words_of.name(setting) if method == "name" else words_of.flag(setting)
            spoken = table.spoken(setting)
            assert said == (spoken.name if method == "name" else spoken.flag), (engine, setting)


def test_sglang_says_its_own_names_and_flags() -> None:
    sglang = vocabularies()["sglang"]
    assert sglang.name("gpu_memory_utilization") == "mem_fraction_static"
    assert sglang.name("max_num_batched_tokens") == "chunked_prefill_size"
    assert sglang.flag("max_model_len", 4096) == "--context-length 4096"
    assert sglang.explicit_pool.flag == "--max-total-tokens"
    assert vocabularies()["vllm"].explicit_pool.flag == "--kv-cache-memory-bytes"


def _server_args_text() -> str:
    lines = [
        line
        for path in sorted(FIXTURES.glob("sglang-*/incident/*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if "server_args=ServerArgs(" in line
    ]
    assert lines
    return "\n".join(lines)


def test_sglang_names_are_the_ones_its_server_args_print() -> None:
    """Each SGLang setting is printed under its name (or one of its names) in the real logs."""
    printed = _server_args_text()
    for s in engine_settings()["sglang"].settings:
        said = [n for n in (s.name, *s.names) if re.search(rf"[(\s]{n}=", printed)]
        assert said, s.name


def _real_launches() -> Iterator[Path]:
    for case in fixture_cases():
        if str(case.expected.get("provenance", "")).startswith("real"):
            yield from sorted(case.incident.glob("**/launch.txt"))


LAUNCHES = list(_real_launches())


@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_vllm_flags_are_read_as_vllm_read_the_same_command(launch: Path) -> None:
    """The launch record's settings are what vLLM's `non-default args` line of the same run
    states: the flag's setting under the same name, the value normalised alike."""
    log = (launch.parent / "server.log").read_text()
    (line,) = [t for t in log.splitlines() if "non-default args: {" in t]
    parsed = dict(non_default_args(line))
    rows = ingest(launch).table("config").to_dicts()
    stated = {r["key"]: r["value"] for r in rows if r["key"] not in ("engine_version", "device")}
    stated = {k: v for k, v in stated.items() if not k.isupper()}  # environment variables
    assert len(stated) >= 4
    assert {k: python_text(parsed.get(k)) for k in stated} == stated


def test_vllm_other_names_are_the_ones_vllm_prints() -> None:
    """cache_config_info's labels and the engine config line of a real run use them."""
    incident = FIXTURES / "vllm-b-saturation" / "incident"
    metrics = next(incident.glob("metrics/*"))
    printed = metrics.read_text() + (incident / "server.log").read_text()
    for s in engine_settings()["vllm"].settings:
        for name in s.names:
            assert re.search(rf"[{{,\s]{name}=", printed), name


@pytest.mark.parametrize("engine", sorted(PROGRAMS))
def test_every_flag_of_the_table_sets_its_setting(engine: str) -> None:
    for s in engine_settings()[engine].settings:
        for flag in s.flags:
            if s.is_switch:
                command, value = f"{PROGRAMS[engine]} {flag}", "True"
            else:
                written, value = SAMPLE_VALUES[s.type]
                command = f"{PROGRAMS[engine]} {flag} {written}"
            found = command_settings(words([(1, command)]))
            assert found is not None and found[-1].key == s.name, (engine, flag)
            assert (found[-1].value, found[-1].engine) == (value, engine), (engine, flag)
    if engine == "vllm":
        (negated,) = command_settings(words([(1, "vllm serve --no-enable-prefix-caching")])) or []
        assert (negated.key, negated.value) == ("enable_prefix_caching", "False")


# Names one engine gives a setting that are another setting's canonical key: TGI's
# max_total_tokens (a request's length, max_model_len) is SGLang's pool in tokens.
_SHARED_NAMES = {("tgi", "max_total_tokens")}


def test_an_engines_name_is_no_other_settings_canonical_key() -> None:
    """Otherwise a row under that name would state two settings; the one listed exception is
    read by its row's engine (the next test)."""
    tables = engine_settings().values()
    canonical = {s.key for t in tables for s in t.settings}
    for t in tables:
        for s in t.settings:
            others = {n for n in (s.name, *s.names) if n != s.key} - {
                n for e, n in _SHARED_NAMES if e == t.engine
            }
            assert not others & canonical, (t.engine, s.name, others & canonical)


def test_a_shared_name_states_the_setting_of_its_rows_engine() -> None:
    def row(engine: str | None) -> dict[str, Any]:
        return {"key": "max_total_tokens", "value": "8192", "origin": "log", "engine": engine}

    def value(key: str, engine: str | None) -> str | None:
        found = effective_value(key, [row(engine)], EngineContext())
        return found.value if found is not None else None

    for engine, name in _SHARED_NAMES:
        assert engine_settings()[engine].named(name).key != name
    assert value("max_model_len", "tgi") == "8192" and value("max_total_tokens", "tgi") is None
    assert value("max_total_tokens", "sglang") == "8192"
    assert value("max_model_len", "sglang") is None
    # an engine's own name that is no canonical key still states itself on its rows
    own = {"key": "mem_fraction_static", "value": "0.88", "origin": "log", "engine": "sglang"}
    found = effective_value("mem_fraction_static", [own], EngineContext())
    assert found is not None and found.value == "0.88"


def test_the_facts_read_each_engines_name_as_the_canonical_key() -> None:
    def row(key: str, value: str, engine: str | None) -> dict[str, Any]:
        return {"key": key, "value": value, "origin": "log", "engine": engine}

    def value(key: str, *rows: dict[str, Any]) -> str | None:
        found = effective_value(key, rows, EngineContext())
        return found.value if found is not None else None

    assert value("enable_prefix_caching", row("disable_radix_cache", "True", "sglang")) == "False"
    assert value("enable_chunked_prefill", row("chunked_prefill_size", "-1", "sglang")) == "False"
    assert value("enable_chunked_prefill", row("chunked_prefill_size", "8192", None)) == "True"
    assert value("kv_cache_dtype", row("cache_dtype", "fp8", "vllm")) == "fp8"
    assert value("enable_prefix_caching", row("prefix_caching", "1", "tgi")) == "True"
    assert value("max_num_queued_reqs", row("max_concurrent_requests", "64", "tgi")) == "64"
    # an engine's name on another engine's row is that engine's business, not this key's
    assert value("gpu_memory_utilization", row("mem_fraction_static", "0.8", "vllm")) is None
    # the stand-in is a word for the rules, not a value of the setting it stands in for
    assert value("max_num_batched_tokens", row("chunked_prefill_size", "8192", "sglang")) is None
    assert {a.name for a in aliases("max_model_len")} == {
        "max_seq_len",
        "context_length",
        "max_total_tokens",
    }


def test_a_word_naming_two_settings_or_an_unknown_field_is_refused() -> None:
    def setting(name: str, flags: tuple[str, ...]) -> EngineSetting:
        return EngineSetting("e", name, name, "int", flags)

    with pytest.raises(ValueError, match="names both"):
        EngineSettings("e", (setting("a", ("--a",)), setting("b", ("--b", "-a"))))
    with pytest.raises(ValueError, match="fields"):
        _setting("e", "a", {"type": "int", "flag": ["--a"]})
    with pytest.raises(ValueError, match="type"):
        _setting("e", "a", {"type": "integer"})


# Keys that declare a flag, an alias or a name mapping: only the engines' tables hold them.
_DECLARING = {"flags", "flag", "aliases", "alias", "invert", "stands_in_for", "positional"}
_FLAG_KEY = re.compile(r"-*[a-z0-9]+(?:-[a-z0-9]+)+")


def _declarations(node: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Dotted paths of the keys in a parsed TOML that declare flags, aliases or names."""
    if isinstance(node, list):
        for item in node:
            yield from _declarations(item, path)
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        here = (*path, key)
        names_table = key == "names" and isinstance(value, dict)
        if key in _DECLARING or names_table or _FLAG_KEY.fullmatch(key):
            yield ".".join(here)
        yield from _declarations(value, here)


def test_declarations_are_recognised_in_the_tables_that_used_to_hold_copies() -> None:
    old_launch = '[engines.vllm.flags]\n"max-model-len" = { key = "max_model_len", type = "int" }'
    old_vocabulary = '[engines.vllm.names]\nmax_num_seqs = "max_num_seqs"'
    old_defaults = '[aliases]\nkv_cache_dtype = [{ name = "cache_dtype" }]'
    for text in (old_launch, old_vocabulary, old_defaults):
        assert list(_declarations(tomllib.loads(text))), text


def test_no_other_toml_in_kvdiag_declares_flags_or_aliases() -> None:
    others = [p for p in sorted(PKG.rglob("*.toml")) if p.parent != TABLES]
    assert len(others) >= 5
    found = {
        p.relative_to(PKG).as_posix(): d
        for p in others
        if (d := list(_declarations(tomllib.loads(p.read_text()))))
    }
    assert not found, f"flags and aliases live in kvdiag/domain/engine_settings: {found}"
    assert sorted(p.stem for p in TABLES.glob("*.toml")) == sorted(engine_settings())
