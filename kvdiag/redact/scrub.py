"""Replace what the catalogue finds in a block of text by stable pseudonyms.

Two passes over an incident. `learn` runs the patterns in order up to the last one marked
`learn`, over every file, so that a value met in one context (a host in a label, a model
path in the launch flags) is known before any file is written; `scrub` then replaces those
values wherever they appear, and runs every pattern. A pattern's prefilter (polars, Rust
regex) picks the lines Python's `re` looks at. What the analysis needs (times, counts,
flags, metric names) is left exactly as it was.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator

import polars as pl

from kvdiag.redact.catalogue import Pattern, catalogue
from kvdiag.redact.handlers import Resolver
from kvdiag.redact.pseudonyms import Pseudonyms
from kvdiag.redact.wrapped import rewrap, unwrap


def _series(lines: list[str]) -> pl.Series:
    """The lines for polars, which wants valid UTF-8: bytes that were not are shown as U+FFFD
    (the prefilters only need to see the rest of the line)."""
    try:
        return pl.Series(lines, dtype=pl.String)
    except (UnicodeEncodeError, pl.exceptions.ComputeError):
        fixed = [ln.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for ln in lines]
        return pl.Series(fixed, dtype=pl.String)


def flagged(lines: list[str], patterns: tuple[Pattern, ...]) -> list[list[int]]:
    """For each pattern, the lines its prefilter flags: only those are given to Python's
    regex (a pass of Python's `re` over every line costs about 1 s per 2 MB)."""
    if not patterns:
        return []
    frame = pl.DataFrame({"line": _series(lines)})
    masks = frame.select(
        pl.col("line").str.contains(p.prefilter).alias(str(i)) for i, p in enumerate(patterns)
    )
    hits = masks.select(pl.all().sum()).row(0)
    return [masks.get_column(str(i)).arg_true().to_list() if n else [] for i, n in enumerate(hits)]


def _by_file(rows: list[int], ends: list[int]) -> Iterator[list[int]]:
    """`rows` (sorted line numbers) split where a file ends (`ends`: each file's end)."""
    if not ends:  # one text
        if rows:
            yield rows
        return
    group: list[int] = []
    end = 0
    for i in rows:
        if group and i >= end:
            yield group
            group = []
        if not group:
            end = ends[bisect.bisect_right(ends, i)]
        group.append(i)
    if group:
        yield group


def _sub_rows(
    lines: list[str],
    rows: list[int],
    regex: re.Pattern[str],
    swap: Callable[[re.Match[str]], str],
    r: Resolver,
    ends: list[int],
    rels: list[str],
) -> None:
    """`regex.sub(swap)` on the given lines: one call over each file's lines joined, not one
    per line (the call cost as much as the search). No pattern matches across a line end."""
    for group in _by_file(rows, ends):
        if rels:
            r.rel = rels[bisect.bisect_right(ends, group[0])]
        done = regex.sub(swap, "\n".join(lines[i] for i in group)).split("\n")
        for i, line in zip(group, done, strict=True):
            lines[i] = line


class Scrubber:
    """The catalogue's patterns, less the kept categories, over one incident's files."""

    def __init__(self, names: Pseudonyms, keep: frozenset[str] = frozenset()) -> None:
        self.names, self.keep = names, keep
        self.patterns = tuple(p for c in catalogue() if c.name not in keep for p in c.patterns)
        self._learner = Resolver(names, keep, learning=True)
        # The first pass stops after the last pattern that learns: later ones cannot hide a
        # value from it.
        last = max((i for i, p in enumerate(self.patterns) if p.learn), default=-1)
        self._to_learn = self.patterns[: last + 1]
        self._writer = Resolver(names, keep, learning=False)

    def learn(self, text: str) -> None:
        """First pass: remember the values found in context, write nothing. Every pattern
        runs, in order, as the second pass will: an address inside an e-mail is gone as an
        e-mail before host names are looked for, and must not be learned as a host."""
        self._apply(unwrap(text.split("\n"))[0], self._learner, [], [], self._to_learn)

    def _apply(
        self,
        lines: list[str],
        r: Resolver,
        ends: list[int],
        rels: list[str],
        patterns: tuple[Pattern, ...] | None = None,
    ) -> None:
        patterns = self.patterns if patterns is None else patterns
        for p, rows in zip(patterns, flagged(lines, patterns), strict=True):
            r.learn_values = p.learn
            _sub_rows(lines, rows, p.regex, r.swapper(p), r, ends, rels)

    def scrub(self, text: str, rel: str) -> str:
        """Second pass: every learned value, then every pattern, replaced in `text`."""
        return self.scrub_many([text], [rel])[0]

    def scrub_many(self, texts: list[str], rels: list[str]) -> list[str]:
        """`scrub` of several files at once: a day of small scrape files costs one polars
        call per few megabytes, not one per file. Replacements are counted per file."""
        if not texts:
            return []
        lines: list[str] = []
        ends: list[int] = []
        shapes = []
        for text in texts:
            joined, shape = unwrap(text.split("\n"))
            lines += joined
            ends.append(len(lines))
            shapes.append(shape)
        r = self._writer
        self._literals(lines, r, ends, rels)
        self._apply(lines, r, ends, rels)
        starts = [0, *ends[:-1]]
        return [
            "\n".join(rewrap(lines[a:b], shape))
            for a, b, shape in zip(starts, ends, shapes, strict=True)
        ]

    def _literals(self, lines: list[str], r: Resolver, ends: list[int], rels: list[str]) -> None:
        """Learned values wherever they appear: the lines that hold one are found by polars
        (Aho-Corasick), then a regex of only the values those lines hold replaces them
        (an alternation of every learned value would be tried at every character)."""
        learned = list(self.names.learned)
        if not learned:
            return
        rows = _series(lines).str.contains_any(learned).arg_true().to_list()
        if not rows:
            return
        held = "\n".join(lines[i] for i in rows)
        present = sorted((v for v in learned if v in held), key=len, reverse=True)
        alternation = "|".join(re.escape(v) for v in present)
        # Not inside a longer name (`a.acme.com` holds `acme.com`) or after an `@`: those
        # are the host and e-mail patterns' to replace whole.
        firsts = re.escape("".join(sorted({v[0] for v in present})))
        literal = re.compile(rf"(?=[{firsts}])(?<![\w@.-])(?:{alternation})(?![\w])")

        memo: dict[str, tuple[str, str]] = {}

        def swap(m: re.Match[str]) -> str:
            original = m.group(0)
            hit = memo.get(original)
            if hit is None:
                category = self.names.learned[original]
                hit = memo[original] = (r.swap(category, original), category)
            else:
                self.names.count(r.rel, hit[1])
            return hit[0]

        _sub_rows(lines, rows, literal, swap, r, ends, rels)
