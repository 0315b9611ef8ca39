"""The table of the shared issue fragments (docs/fragments.md) says what kvdiag concludes
from each.

Each row is checked against a fresh analysis of the fragment alone, and a plain-text oracle
(the engines' own words for a full pool, a refusal or a rejection) checks that no fragment
showing trouble is left undecided.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, shared
from tools.fragments.table import START, analyse, fragments, page_rows, shorten

PAGE = (ROOT / "docs" / "fragments.md").read_text()
ROWS = page_rows(PAGE)

# What an engine prints only when the pool is full, refused, or a request was turned away.
TROUBLE = re.compile(
    r"is preempted by PreemptionMode|#retracted_reqs|Retract requests|Decode out of memory"
    r"|CUDA out of memory|ValueError: To serve at least one request"
    r"|larger than the maximum number of tokens that can be stored in KV cache"
    r"|runs out of memory|\" (?:429|503) "
)


def test_the_page_holds_the_table() -> None:
    assert START in PAGE
    assert len(ROWS) >= 50


def test_every_fragment_has_a_row() -> None:
    folder = shared("realdata", "issues")
    assert {p.name for p in fragments(folder)} == set(ROWS)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_the_row_is_what_kvdiag_says(name: str) -> None:
    path = shared("realdata", "issues", name)
    row = analyse(path)
    _, verdict, confidence, lines_read, why = ROWS[name]
    assert (f"`{row.verdict}`", row.confidence, row.lines_read) == (
        verdict,
        confidence,
        lines_read,
    )
    assert row.why.replace("|", "\\|") == why


@pytest.mark.parametrize("name", sorted(ROWS))
def test_trouble_in_the_engines_words_is_never_undecided(name: str) -> None:
    text = Path(shared("realdata", "issues", name)).read_text(errors="replace")
    if TROUBLE.search(text):
        assert ROWS[name][1] != "`insufficient_evidence`", name


def test_shorten_cuts_at_a_word_and_says_so() -> None:
    assert shorten("a b c", 10) == "a b c"
    cut = shorten("saturation: KV pool full while requests waited", 20)
    assert cut.endswith(" …") and len(cut) <= 21 and "waite" not in cut
