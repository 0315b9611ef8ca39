"""Prometheus API JSON read with its sample pairs left as text.

A query_range answer for a day of 200 replicas holds millions of `[t, "v"]` pairs, and
json.loads makes three Python objects of each (seconds for a fleet's day) only for
kvdiag to turn them back into text (the live source's saved files) or into columns (the
ingester, which reads them again from the text with polars). `split_pairs` takes every
`"values": [...]` array whose pairs are all plain out of the text first, parses the rest
(the structure: series and their labels) with json.loads, and leaves a `PairArray` in each
array's place. Plain means `[number, "value"]` with a value of letters, digits and `.+-`
only, which every Prometheus-compatible server writes ("0.5", "NaN", "+Inf", "1e+06"): the
strict pattern makes the taken-out text valid JSON by construction, so nothing the full
parse would have refused is let through. An array that is not plain stays in the document
and json.loads reads it as before.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

# Possessive quantifiers (`*+`): nothing here needs backtracking, and it halves the time.
_NUMBER = r"-?[0-9][0-9.eE+-]*+"
_PLAIN_VALUE = r'"[0-9A-Za-z.+-]*+"'
_ONE = rf"\[\s*+{_NUMBER}\s*+,\s*+{_PLAIN_VALUE}\s*+\]"
_VALUES = re.compile(rf'"values"\s*:\s*\[(\s*+(?:{_ONE}(?:\s*+,\s*+{_ONE})*+)?\s*)\]')


@dataclass(frozen=True, slots=True)
class PairArray:
    """One `values` array kept as text: its span in the document and its pair count."""

    start: int  # offset of the array's content (after `[`) in the document text
    end: int  # offset of its closing `]`
    count: int

    def text(self, document: str) -> str:
        return document[self.start : self.end]


def split_pairs(text: str) -> tuple[Any, list[PairArray]]:
    """The document parsed with each plain `values` array replaced by its PairArray.

    Raises json.JSONDecodeError (with the line of the original text) when the document is
    not valid JSON; RecursionError as json.loads does.
    """
    arrays: list[PairArray] = []
    # The stand-in object's key is new for each document: no text can forge one.
    mark = f"kvdiag-pairs-{os.urandom(8).hex()}"

    def stand_in(m: re.Match[str]) -> str:
        start, end = m.span(1)
        count = text.count("[", start, end)  # one `[` a pair: plain values hold none
        arrays.append(PairArray(start, end, count))
        return f'"values": {{"{mark}": {len(arrays) - 1}}}'

    skeleton = _VALUES.sub(stand_in, text)
    try:
        doc = json.loads(skeleton, object_hook=_hook(mark, arrays))
    except json.JSONDecodeError:
        json.loads(text)  # the full parse says where, in lines of the original text
        raise  # not reached unless the stand-ins broke the document: report it anyway
    return doc, arrays


def _hook(mark: str, arrays: list[PairArray]) -> Any:
    def hook(obj: dict[str, Any]) -> Any:
        return arrays[obj[mark]] if len(obj) == 1 and mark in obj else obj

    return hook


def compact_pairs(document: str, array: PairArray) -> str:
    """The array's pairs as `[t,"v"],[t,"v"]` (no white space), for joining and rendering."""
    text = array.text(document)
    return re.sub(r"\s+", "", text) if _SPACE.search(text) else text


_SPACE = re.compile(r"\s")
