"""A regex rewritten for lines of ASCII text only: the same matches and groups there, faster.

polars runs Rust regexes, whose classes are Unicode by default: `\\d` is every script's
digits and `[^()]` every character but two, so each class compiles to a large UTF-8
automaton, and extracting a stats line's twenty groups spent most of its time walking
it. On a line of ASCII characters a class can only ever match its ASCII part, so the
rewritten pattern (`\\d` -> `[0-9]`, `[^()]` -> `[\\x00-\\x7f&&[^()]]`, `.` -> ASCII but
`\\n`) matches exactly where the original does and captures the same text; on any other
line the caller must use the original. A construct whose ASCII part is not spelled out
here (`\\D`, `\\p{..}`, a nested class) raises ValueError, and the caller keeps the
original pattern.
"""

from __future__ import annotations

# Shorthand classes as ASCII ranges, usable both alone (in brackets) and inside a class.
_SHORTHAND = {"d": "0-9", "s": r"\t\n\x0b\x0c\r ", "w": "0-9A-Za-z_"}
_UNSUPPORTED = set("DSWpPX")  # negated or Unicode-property classes
_ANY_BUT_NEWLINE = r"[\x00-\x09\x0b-\x7f]"


def ascii_only(pattern: str) -> str:
    """`pattern` with every Unicode class cut to its ASCII part (see the module doc)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(_escape(pattern, i, in_class=False))
            i += 2
        elif ch == "[":
            body, i = _class(pattern, i)
            out.append(body)
        elif ch == ".":
            out.append(_ANY_BUT_NEWLINE)
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _escape(pattern: str, i: int, in_class: bool) -> str:
    """The escape at pattern[i] (a backslash and one character), its ASCII form."""
    if i + 1 >= len(pattern):
        raise ValueError(f"pattern ends in a backslash: {pattern!r}")
    letter = pattern[i + 1]
    if letter in _UNSUPPORTED:
        raise ValueError(f"\\{letter} has no ASCII form here: {pattern!r}")
    if letter in _SHORTHAND:
        return _SHORTHAND[letter] if in_class else f"[{_SHORTHAND[letter]}]"
    # Anything else is ASCII already: a literal (\], \.), an anchor (\b), or the start of
    # a code point (\x1f), whose digits are copied as they come.
    return pattern[i : i + 2]


def _class(pattern: str, start: int) -> tuple[str, int]:
    """The bracketed class at pattern[start], rewritten, and where the pattern goes on."""
    i = start + 1
    negated = pattern[i : i + 1] == "^"
    i += negated
    parts: list[str] = []
    first = True
    while True:
        if i >= len(pattern):
            raise ValueError(f"unclosed class in {pattern!r}")
        ch = pattern[i]
        if ch == "]" and not first:
            break
        if ch == "[":
            raise ValueError(f"nested class in {pattern!r}")
        if ch == "\\":
            parts.append(_escape(pattern, i, in_class=True))
            i += 2
        else:
            parts.append(ch)
            i += 1
        first = False
    body = "".join(parts)
    rewritten = f"[\\x00-\\x7f&&[^{body}]]" if negated else f"[{body}]"
    return rewritten, i + 1
