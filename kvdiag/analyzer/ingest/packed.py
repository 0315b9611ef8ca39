"""Many short strings kept as one: the names of a day of scrape files.

A day of one-second scrapes is 86,400 files, each with a path and a name relative to the
incident folder. As 172,800 str objects made between discovery's temporaries (directory
entries, peeks) they pin the memory those freed, which then cannot go back to the system:
the process stays larger for the whole run, by more than the text itself, than with the
same text held as two strings.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import overload


class PackedStrings(Sequence[str]):
    """An immutable sequence of strings stored as one string and their end offsets."""

    __slots__ = ("_ends", "_text")

    def __init__(self, items: Iterable[str]) -> None:
        parts = list(items)
        self._text = "".join(parts)
        self._ends = array("q", accumulate(map(len, parts)))

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> PackedStrings: ...
    def __getitem__(self, index: int | slice) -> str | PackedStrings:
        if isinstance(index, slice):
            return PackedStrings(self[i] for i in range(*index.indices(len(self))))
        n = len(self._ends)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("PackedStrings index out of range")
        return self._text[self._ends[index - 1] if index else 0 : self._ends[index]]

    def __len__(self) -> int:
        return len(self._ends)

    def __iter__(self) -> Iterator[str]:
        start = 0
        for end in self._ends:
            yield self._text[start:end]
            start = end

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=False))

    def __hash__(self) -> int:  # as the tuple it equals
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PackedStrings({list(self)!r})"
