"""The vocabulary seam: every engine says everything, with flags its launcher accepts, and no
rule phrases an engine's flag on its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kvdiag.analyzer.facts.effective import defaults_table
from kvdiag.analyzer.ingest.config.cmdline import flag_table
from kvdiag.rules.support.vocabulary import Vocabulary, vocabularies

RULES = Path(__file__).resolve().parents[1] / "kvdiag" / "rules"
_FLAG = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)+")


def _tables(v: Vocabulary) -> dict[str, set[str]]:
    return {
        "names": set(v.names),
        "flags": set(v.flags),
        "words": set(v.words),
        "phrases": set(v.phrases),
    }


def test_every_engine_defines_every_key() -> None:
    found = vocabularies()
    assert {"vllm", "sglang"} <= set(found)
    first = _tables(found["vllm"])
    for engine, v in found.items():
        assert _tables(v) == first, engine


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_setting_flags_are_flags_the_engine_accepts(engine: str) -> None:
    v = vocabularies()[engine]
    accepted = flag_table().flags[engine]
    for setting, flag in [*v.flags.items(), ("explicit pool", v.explicit_pool.flag)]:
        assert flag.removeprefix("--") in accepted, (engine, setting, flag)


def test_sglang_names_are_the_aliases_of_the_canonical_keys() -> None:
    """What the vocabulary calls a setting is what engine_defaults.toml maps it from."""
    aliases = defaults_table().aliases
    for setting, name in vocabularies()["sglang"].names.items():
        if name == setting:
            continue
        own = {a.name for a in aliases.get(setting, ()) if a.engine == "sglang"}
        if own:
            assert name in own, (setting, name, own)


def test_one_engines_phrases_never_name_the_others_flags() -> None:
    found = vocabularies()
    for engine, v in found.items():
        said = " ".join([*v.phrases.values(), *v.flags.values(), v.explicit_pool.flag])
        for other, w in found.items():
            if other == engine:
                continue
            theirs = set(w.flags.values()) - set(v.flags.values())
            theirs |= set(_FLAG.findall(" ".join(w.phrases.values()))) - set(_FLAG.findall(said))
            assert not [f for f in theirs if f in said], (engine, other)


def _string_literals(path: Path) -> list[str]:
    """String constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


@pytest.mark.parametrize("path", sorted(RULES.glob("*.py")), ids=lambda p: p.name)
def test_rules_phrase_flags_through_the_vocabulary(path: Path) -> None:
    flags = [f for s in _string_literals(path) for f in _FLAG.findall(s)]
    assert not flags, f"{path.name} writes {flags}: take them from vocabulary.toml"


def test_counts_read_as_the_engine_says_them() -> None:
    sglang, vllm = vocabularies()["sglang"], vocabularies()["vllm"]
    assert sglang.count(1) == "1 retraction" and sglang.count(3) == "3 retractions"
    assert vllm.count(29) == "29 preemptions"
    assert sglang.flag("max_num_seqs", 24) == "--max-running-requests 24"
    assert vllm.flag("max_num_seqs", 24) == "--max-num-seqs 24"
