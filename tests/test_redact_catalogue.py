"""Each redaction pattern on its own: its samples found, its near misses left alone, and its
prefilter true wherever the pattern can match (kvdiag/redact/categories.toml)."""

from __future__ import annotations

import re

import polars as pl
import pytest

from kvdiag.domain.errors import FormatPackError
from kvdiag.redact.catalogue import Pattern, catalogue, category_names, parse_catalogue
from kvdiag.redact.handlers import Resolver, replacement
from kvdiag.redact.pseudonyms import PSEUDONYM, Pseudonyms
from kvdiag.redact.scrub import Scrubber

PATTERNS = [pytest.param(p, id=f"{p.category}.{p.id}") for c in catalogue() for p in c.patterns]


def _found(pattern: Pattern, text: str) -> list[str]:
    """The values the pattern replaces in `text` (as the second pass would)."""
    r = Resolver(Pseudonyms(), frozenset(), learning=False)
    out = []
    for m in pattern.regex.finditer(text):
        if replacement(pattern, m, r) != m.group(0):
            out.append(m.group("v") if "v" in pattern.regex.groupindex else m.group(0))
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
def test_samples_are_found(pattern: Pattern) -> None:
    for sample in pattern.samples:
        assert tuple(_found(pattern, sample.text)) == sample.found, sample.text


@pytest.mark.parametrize("pattern", PATTERNS)
def test_near_misses_are_left_alone(pattern: Pattern) -> None:
    for text in pattern.near_misses:
        assert _found(pattern, text) == [], text


@pytest.mark.parametrize("pattern", PATTERNS)
def test_prefilter_flags_every_line_the_pattern_replaces_in(pattern: Pattern) -> None:
    lines = [s.text for s in pattern.samples] + list(pattern.near_misses)
    flags = pl.Series(lines).str.contains(pattern.prefilter).to_list()
    for line, flag in zip(lines, flags, strict=True):
        if _found(pattern, line):
            assert flag, f"prefilter misses {line!r}"


def test_each_sample_is_gone_after_a_whole_scrub() -> None:
    """All patterns in order, as a file is scrubbed: no sample's value survives."""
    for c in catalogue():
        for p in c.patterns:
            for sample in p.samples:
                out = Scrubber(Pseudonyms()).scrub(sample.text, "x")
                for value in sample.found:
                    assert value not in out, (p.id, sample.text, out)


def test_pseudonyms_are_stable_and_never_rematched() -> None:
    names = Pseudonyms()
    scrubber = Scrubber(names)
    line = 'INFO:     10.9.8.7:4242 - "POST /v1/completions HTTP/1.1" 200 OK'
    first = scrubber.scrub(line, "a.log")
    assert scrubber.scrub(line, "b.log") == first == line.replace("10.9.8.7", "ip-1")
    assert scrubber.scrub(first, "c.log") == first  # a pseudonym is left as it is
    assert PSEUDONYM.match("ip-1") and PSEUDONYM.match("[prompt-3, 12 chars]")
    assert dict(names.counts["a.log"]) == {"ip": 1}


def test_kept_categories_are_not_touched() -> None:
    line = "vllm serve /data/acme-7b --host 10.1.1.1"
    assert Scrubber(Pseudonyms(), frozenset({"model"})).scrub(line, "x") == (
        "vllm serve /data/acme-7b --host ip-1"
    )


def test_a_value_learned_in_context_is_replaced_everywhere() -> None:
    names = Pseudonyms()
    scrubber = Scrubber(names)
    scrubber.learn("vllm serve /data/acme-7b --port 8000")
    assert scrubber.scrub("Starting to load model /data/acme-7b...", "x") == (
        "Starting to load model model-1..."
    )


def test_a_plain_word_is_replaced_only_in_its_context() -> None:
    names = Pseudonyms()
    scrubber = Scrubber(names)
    scrubber.learn("Namespace(host='worker', port=8000)")
    assert scrubber.scrub("worker process started; host='worker'", "x") == (
        "worker process started; host='host-1'"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("schema = 2\n", "schema"),
        (
            "schema = 1\n[[category]]\nname='x'\ndoc=''\n[[category.pattern]]\nid='a'\n"
            "regex='('\nprefilter='a'\nsamples=[{text='a', found=[]}]\n",
            "regex",
        ),
        (
            "schema = 1\n[[category]]\nname='x'\ndoc=''\n[[category.pattern]]\nid='a'\n"
            "regex='a'\nprefilter='a'\nhandler='nope'\nsamples=[{text='a', found=[]}]\n",
            "handler",
        ),
        (
            "schema = 1\n[[category]]\nname='x'\ndoc=''\n[[category.pattern]]\nid='a'\n"
            "regex='a'\nprefilter='a'\n",
            "samples",
        ),
        (
            "schema = 1\n[[category]]\nname='x'\ndoc=''\n[[category.pattern]]\nid='a'\n"
            "regex='a'\nsamples=[{text='a', found=[]}]\n",
            "prefilter",
        ),
    ],
)
def test_a_malformed_catalogue_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(FormatPackError, match=re.escape(why)):
        parse_catalogue(text)


def test_category_names_read_without_compiling_are_the_catalogues() -> None:
    # The command line's choices come from the TOML alone (no pattern compiled).
    assert category_names() == tuple(c.name for c in catalogue())
