"""What every parser must do with any input, and the material hostile inputs are made of.

`check_ingest` runs one ingester on one file exactly as the pipeline does and asserts the
contract: no exception; exactly one balanced account per file (parsed + unmatched +
undecodable = total) whose total is the file's line count; problems inside the file; and
frames the store accepts (every batch is appended to a real DuckDB store).
"""

from __future__ import annotations

import codecs
import json
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit, TableBatch
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND
from kvdiag.analyzer.store.database import Store
from kvdiag.domain.records.diagnosis import InputProblem

SCRATCH = Path(tempfile.mkdtemp(prefix="kvdiag-properties-"))

# Numbers and words that break naive parsers.
HOSTILE_NUMBERS = (
    "NaN",
    "nan",
    "+Inf",
    "-Inf",
    "inf",
    "1e400",
    "-1e400",
    "-1",
    "-0.0",
    "0",
    "1e-400",
    "99999999999999999999999999",
    "-99999999999999999999999999",
    "9223372036854775808",
    "1.7976931348623157e308",
    "0x1F",
    "1_000",
    "١٢٣",  # Arabic-Indic digits: str.isdigit() says yes, int() may not
    "²",
    "",
    "1,2,3",
    "1.2.3",
    "true",
    "null",
)
HOSTILE_TEXT = (
    "\x00",
    "\x1b[2J\x1b]0;pwned\x07",
    "\u202e",
    "\u200b",
    "\ufffd",
    "\r",
    "\t",
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "| --- |",
    "\\",
    '"',
    "'",
    "{",
    "}",
    "[",
    "]",
    "#",
    " ",
    "\u00e9",
    "\U0001f600",
)

hostile_number = st.sampled_from(HOSTILE_NUMBERS) | st.integers().map(str) | st.floats().map(str)
hostile_word = (
    st.sampled_from(HOSTILE_TEXT) | st.text(max_size=8) | st.sampled_from(HOSTILE_NUMBERS)
)


def mutated(line: str, draw: st.DrawFn) -> str:
    """A line with some of its numbers swapped for hostile ones and some noise inserted."""
    out = []
    for part in _split_numbers(line):
        if part[:1].isdigit() and draw(st.booleans()):
            part = draw(hostile_number)
        out.append(part)
    text = "".join(out)
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(hostile_word) + text[at:]
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # cut short
    return text


def _split_numbers(line: str) -> list[str]:
    parts: list[str] = []
    for ch in line:
        if parts and ch.isdigit() == parts[-1][:1].isdigit():
            parts[-1] += ch
        else:
            parts.append(ch)
    return parts


@st.composite
def lines_from(draw: st.DrawFn, material: tuple[str, ...], max_lines: int = 12) -> bytes:
    """A file of lines: real material mutated, random text, in a random encoding shape."""
    lines = draw(
        st.lists(
            st.sampled_from(material) | st.text(max_size=40),
            max_size=max_lines,
        )
    )
    lines = [mutated(t, draw) if draw(st.booleans()) else t for t in lines]
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    text = newline.join(lines) + draw(st.sampled_from(["", "\n"]))
    return encode(text, draw)


def encode_json(doc: Any, draw: st.DrawFn, indent: int) -> bytes:
    """`doc` as JSON (flat or indented), now and then cut short, then `encode`d."""
    text = json.dumps(doc, indent=draw(st.sampled_from([None, indent])), allow_nan=True)
    if draw(st.integers(0, 5)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return encode(text, draw)


def deep_nesting(prefix: bytes) -> bytes:
    """A JSON document nested past Python's recursion limit after `prefix`."""
    return prefix + b"[" * 100_000 + b"]" * 100_000 + b"}"


def encode(text: str, draw: st.DrawFn) -> bytes:
    """Text as bytes, now and then with a BOM, in UTF-16 or with invalid bytes spliced in."""
    shape = draw(st.integers(0, 19))
    if shape == 0:
        return codecs.BOM_UTF16_LE + text.encode("utf-16-le", errors="replace")
    if shape == 1:
        return codecs.BOM_UTF8 + text.encode("utf-8", errors="replace")
    data = text.encode("utf-8", errors="surrogatepass")
    if shape == 2:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]
    return data


def any_bytes() -> st.SearchStrategy[bytes]:
    return st.binary(max_size=600)


@cache
def _store() -> Store:
    """One store for the whole session: appending checks the frames' types and columns."""
    return Store()


def expected_lines(data: bytes) -> int | None:
    """Lines as `grep -c ''` counts them, where the bytes alone tell (not gzip or UTF-16)."""
    if data.startswith((b"\x1f\x8b", codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return None
    data = data.removeprefix(codecs.BOM_UTF8)  # an encoding mark, not text
    if not data:
        return None  # a mark alone: no line, or one empty line, are both fair counts
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def check_ingest(kind: str, name: str, data: bytes) -> tuple[Account, list[InputProblem]]:
    """Ingest `data` saved as `name` with the `kind` ingester and check the contract."""
    path = SCRATCH / name
    path.write_bytes(data)
    unit = InputUnit(kind, name, (path,), (name,), len(data), "default")
    accounts, problems = [], []
    for emit in INGESTERS_BY_KIND[kind]().ingest(unit, IngestContext(SCRATCH, None, None, None)):
        if isinstance(emit, TableBatch):
            _store().append(
                emit.table, emit.frame, emit.series
            )  # as the pipeline does, batch by batch
        elif isinstance(emit, InputProblem):
            problems.append(emit)
        else:
            accounts.append(emit)
    assert len(accounts) == 1, accounts
    check_account(accounts[0], expected_lines(data))
    for problem in problems:
        assert problem.path == name, problem
        assert problem.line is None or 1 <= problem.line <= max(accounts[0].lines_total, 1), problem
    return accounts[0], problems


def check_account(acct: Account, lines: int | None) -> None:
    assert acct.balanced(), acct
    assert min(acct.lines_parsed, acct.lines_unmatched, acct.lines_undecodable) >= 0, acct
    if lines is not None:
        assert acct.lines_total == lines, (acct, lines)
