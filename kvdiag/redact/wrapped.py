"""Records a terminal broke into lines of one width: redacted whole, cut back the same way.

A log copied from a terminal W characters wide holds each long record as pieces of W (or
W - 1, where a copy stripped a trailing blank) characters, the last shorter; the analysis
joins them back (analyzer/ingest/logs/wraps.py) because every piece but the last is full.
A value can be cut in two by the wrap, where no pattern sees it, and a pseudonym shorter
than its value would leave a piece short, where the analysis no longer sees a wrap. So the
pieces are joined, redacted as one line, and cut again at the same lengths: every piece
but the last keeps its width, and the last takes what is left.
"""

from __future__ import annotations

_MIN_FULL = 3  # lines at the widest length before a file counts as wrapped
_WIDTHS = range(40, 513)  # terminal widths
_SHARE = 50  # at least one line in this many at the widest length


def wrap_width(lines: list[str]) -> int | None:
    """The terminal width a text was wrapped at, or None: the widest length, held by
    several lines (an unwrapped log has one longest line, seldom three of one length)."""
    if len(lines) < _MIN_FULL:
        return None
    lengths = list(map(len, lines))
    widest = max(lengths)
    # A replayed or repetitive log repeats its longest line too, but seldom: pieces of a
    # wrapped log are a good share of its lines.
    need = max(_MIN_FULL, len(lines) // _SHARE)
    return widest if widest in _WIDTHS and lengths.count(widest) >= need else None


def unwrap(lines: list[str]) -> tuple[list[str], list[list[int]] | None]:
    """Each run of full pieces and the line after it joined; the pieces' lengths."""
    width = wrap_width(lines)
    if width is None:
        return lines, None
    joined: list[str] = []
    shapes: list[list[int]] = []
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) - 1 and len(lines[j]) >= width - 1:
            j += 1
        joined.append("".join(lines[i : j + 1]))
        shapes.append([len(piece) for piece in lines[i : j + 1]])
        i = j + 1
    return joined, shapes


def rewrap(joined: list[str], shapes: list[list[int]] | None) -> list[str]:
    """The joined lines cut at their pieces' lengths again (as many lines as before)."""
    if shapes is None:
        return joined
    out: list[str] = []
    for text, lengths in zip(joined, shapes, strict=True):
        pos = 0
        for n in lengths[:-1]:
            out.append(text[pos : pos + n])
            pos += n
        out.append(text[pos:])
    return out
