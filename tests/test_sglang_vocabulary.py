"""The vocabulary seam: every engine says everything, each flag a phrase names is one its
launcher accepts, and no rule phrases an engine's flag on its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kvdiag.analyzer.model.quantities.vocabulary import Vocabulary, vocabularies
from kvdiag.domain.settings import engine_settings

RULES = Path(__file__).resolve().parents[1] / "kvdiag" / "rules"
_FLAG = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)+")


def _tables(v: Vocabulary) -> dict[str, set[str]]:
    return {"words": set(v.words), "phrases": set(v.phrases)}


def test_every_engine_defines_every_key() -> None:
    found = vocabularies()
    assert {"vllm", "sglang", "tgi"} <= set(found)
    first = _tables(found["vllm"])
    for engine, v in found.items():
        assert _tables(v) == first, engine
        assert v.explicit_pool.unit in ("bytes", "tokens"), engine


def _said(v: Vocabulary) -> set[str]:
    """Every flag the engine's phrases and explicit pool name."""
    return set(_FLAG.findall(" ".join([*v.phrases.values(), v.explicit_pool.flag])))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi"])
def test_flags_the_phrases_name_are_flags_the_engine_accepts(engine: str) -> None:
    v = vocabularies()[engine]
    said = _said(v)
    assert v.explicit_pool.flag in said and len(said) >= 6
    unknown = [f for f in sorted(said) if engine_settings()[engine].by_flag(f) is None]
    assert not unknown, f"{engine} phrases name flags its settings table lacks: {unknown}"


def test_one_engines_phrases_never_name_the_others_flags() -> None:
    for engine, v in vocabularies().items():
        own = {f for s in engine_settings()[engine].settings for f in s.flags}
        for other in vocabularies():
            if other == engine:
                continue
            theirs = {f for s in engine_settings()[other].settings for f in s.flags} - own
            assert not _said(v) & theirs, (engine, other, _said(v) & theirs)


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
    assert not flags, f"{path.name} writes {flags}: take them from the vocabulary"


def test_counts_read_as_the_engine_says_them() -> None:
    sglang, vllm = vocabularies()["sglang"], vocabularies()["vllm"]
    assert sglang.count(1) == "1 retraction" and sglang.count(3) == "3 retractions"
    assert vllm.count(29) == "29 preemptions"
    assert sglang.flag("max_num_seqs", 24) == "--max-running-requests 24"
    assert vllm.flag("max_num_seqs", 24) == "--max-num-seqs 24"
    tgi = vocabularies()["tgi"]
    assert tgi.count(2) == "2 over-budget deferrals"
    assert tgi.flag("max_num_queued_reqs", 64) == "--max-concurrent-requests 64"
    assert tgi.name("max_model_len") == "max_total_tokens"
