"""What the SGLang fixtures' expected.toml say of their own provenance is true.

A fixture that calls lines real names the fragment they come from; those lines must be that
fragment's, byte for byte, so a reader can tell the real evidence from what was assembled
around it. A fixture that calls itself assembled claims no real lines.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import FixtureCase, fixture_cases, shared

CASES = [c for c in fixture_cases() if c.name.startswith("sglang-")]
# "<file> lines 101-110 are ../shared/realdata/issues/<fragment> lines 1-10, verbatim"
_SPAN = re.compile(
    r"(?P<file>[\w.-]+) lines (?P<a>\d+)-(?P<b>\d+) are \.\./shared/realdata/issues/\s*"
    r"(?P<fragment>[\w.-]+) lines (?P<c>\d+)-(?P<d>\d+), verbatim"
)
# "<file> is ../shared/realdata/issues/<fragment>" or "<file> is <fragment>" (whole files)
_WHOLE = re.compile(
    r"(?P<file>[\w-]+\.log) is (?:\.\./shared/realdata/issues/)?(?P<fragment>[\w.-]+\.log)"
)


def _lines(text: str, first: int, last: int) -> list[str]:
    return text.splitlines()[first - 1 : last]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_provenance_says_real_or_assembled_and_backs_it(case: FixtureCase) -> None:
    text = " ".join(case.expected["provenance"].split())
    kind = re.match(r"(real \+ assembled|real|assembled)\b", text)
    assert kind, f"{case.name}: provenance must open with real, real + assembled or assembled"
    claims = list(_SPAN.finditer(text)) + list(_WHOLE.finditer(text))
    if kind[1] == "assembled":
        assert not claims, f"{case.name}: an assembled fixture claims real lines"
    else:
        assert claims, f"{case.name}: says real but names no fragment lines to check"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lines_called_real_are_the_fragments_own(case: FixtureCase) -> None:
    text = " ".join(case.expected["provenance"].split())
    for m in _SPAN.finditer(text):
        fragment = shared("realdata", "issues", m["fragment"]).read_text()
        ours = (case.incident / m["file"]).read_text()
        assert _lines(ours, int(m["a"]), int(m["b"])) == _lines(
            fragment, int(m["c"]), int(m["d"])
        ), m[0]
    for m in _WHOLE.finditer(text):
        fragment = shared("realdata", "issues", m["fragment"]).read_bytes()
        assert (case.incident / m["file"]).read_bytes() == fragment, m[0]
