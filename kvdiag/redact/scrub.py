"""Replace what the catalogue finds in a block of text by stable pseudonyms.

Two passes over an incident: `learn` runs the patterns marked `learn` over every file, so
that a value met in one context (a host in a label, a model path in the launch flags) is
known before any file is written; `scrub` then replaces those values wherever they appear,
and runs every pattern. Only numbers of the values' own making are touched: the analysis
needs the rest (times, counts, flags, metric names) exactly as they were.
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from collections.abc import Callable, Iterator

import polars as pl

from kvdiag.redact.catalogue import Pattern, catalogue
from kvdiag.redact.pseudonyms import Pseudonyms, is_value
from kvdiag.redact.wrapped import rewrap, unwrap

# Public sites everyone knows: naming them identifies nobody, and links to docs stay useful.
PUBLIC_HOSTS = (
    "huggingface.co",
    "hf.co",
    "github.com",
    "githubusercontent.com",
    "pypi.org",
    "python.org",
    "pytorch.org",
    "nvidia.com",
    "vllm.ai",
    "sglang.ai",
    "readthedocs.io",
    "docker.io",
    "docker.com",
)
_MEMO_MAX = 100_000  # values remembered per pass, so that memory stays bounded
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class Resolver:
    """Turns an original value into what stands in its place, and counts it for a file."""

    def __init__(self, names: Pseudonyms, keep: frozenset[str], learning: bool) -> None:
        self.names, self.keep, self.learning = names, keep, learning
        self.rel = ""
        self.learn_values = False  # the pattern at work marks what it finds for everywhere
        # pattern -> whole match -> (what it became, the categories it counted): a client
        # address recurs on thousands of access lines, and working it out is the costly part.
        self._memo: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}
        self._assigned: list[str] = []

    def swapper(self, pattern: Pattern) -> Callable[[re.Match[str]], str]:
        """The `re.sub` callback of a pattern: each distinct match worked out once."""
        memo = self._memo.setdefault(pattern.id, {})
        count = self.names.count

        def swap(m: re.Match[str]) -> str:
            whole = m.group(0)
            hit = memo.get(whole)
            if hit is None:
                self._assigned = []
                new = replacement(pattern, m, self)
                if len(memo) >= _MEMO_MAX:
                    memo.clear()
                memo[whole] = (new, tuple(self._assigned))
                return new
            if not self.learning:
                for category in hit[1]:
                    count(self.rel, category)
            return hit[0]

        return swap

    def assign(self, category: str, original: str) -> str | None:
        """The pseudonym, or None where the value stays (kept category, or no value)."""
        if category in self.keep or not is_value(original):
            return None
        self._assigned.append(category)
        if self.learning:
            if self.learn_values:
                self.names.learn(category, original)
        else:
            self.names.count(self.rel, category)
        return self.names.name(category, original)

    def swap(self, category: str, original: str) -> str:
        return self.assign(category, original) or original


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _local(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return addr.is_loopback or addr.is_unspecified or str(addr) == "255.255.255.255"


def host(name: str, r: Resolver) -> str:
    """A host as an address, a host name, or kept (loopback, localhost, public sites)."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    addr = _address(bare)
    if addr is not None:
        return name if _local(addr) else name.replace(bare, r.swap("ip", bare))
    lowered = bare.lower().rstrip(".")
    if lowered in _LOCAL_NAMES or bare.isdigit() or _public(lowered):
        return name
    return r.swap("host", bare)


def _public(name: str) -> bool:
    return any(name == d or name.endswith("." + d) for d in PUBLIC_HOSTS)


def _hostport(value: str, r: Resolver) -> str:
    head, sep, port = value.rpartition(":")
    if sep and port.isdigit() and head and (head.count(":") == 0 or head.startswith("[")):
        return host(head, r) + ":" + port
    return host(value, r)


def _ipv6(value: str, r: Resolver) -> str:
    groups = value.split(":")
    whole = len(groups) == 8 and all(groups)
    if not whole and ("::" not in value or sum(1 for g in groups if g) < 2):
        return value  # a time of day, a MAC address, a C++ scope
    addr = _address(value)
    if addr is None or _local(addr):
        return value
    return r.swap("ip", value)


def _pod(value: str, r: Resolver) -> str:
    suffix = value.rsplit("-", 2)[-2:]
    return r.swap("host", value) if any(c.isdigit() for c in "".join(suffix)) else value


def _credential(value: str, r: Resolver) -> str:
    looks_random = any(c.isdigit() for c in value) or len(value) >= 24
    return r.swap("secret", value) if looks_random else value


def _prompt(value: str, r: Resolver) -> str:
    name = r.assign("prompt", value)
    return value if name is None else f"[{name}, {len(value)} chars]"


def _token_ids(value: str, r: Resolver) -> str:
    if "prompt" in r.keep:
        return value
    if not r.learning:
        r.names.count(r.rel, "prompt")
    return ", ".join("0" for _ in value.split(","))


def _request_id(value: str, r: Resolver) -> str:
    return value if value.isdigit() else r.swap("request_id", value)


_VALUE_HANDLERS: dict[str, Callable[[str, Resolver], str]] = {
    "hostport": _hostport,
    "ipv4": lambda v, r: v if (a := _address(v)) is None or _local(a) else r.swap("ip", v),
    "ipv6": _ipv6,
    "fqdn": lambda v, r: host(v, r),
    "pod": _pod,
    "credential": _credential,
    "prompt": _prompt,
    "token_ids": _token_ids,
    "request_id": _request_id,
}


def _url(m: re.Match[str], r: Resolver) -> str:
    """`scheme://user:password@host`: the user, the password and the host each replaced."""
    out = m.group("scheme") + "://"
    if m.group("user") is not None:
        out += r.swap("user", m.group("user"))
        if m.group("pw") is not None:
            out += ":" + r.swap("secret", m.group("pw"))
        out += "@"
    return out + host(m.group("v"), r)


def replacement(pattern: Pattern, m: re.Match[str], r: Resolver) -> str:
    """What the whole match becomes."""
    if pattern.handler == "url":
        return _url(m, r)
    start, end = pattern.value_span(m)
    value = m.string[start:end]
    handler = _VALUE_HANDLERS.get(pattern.handler)
    new = handler(value, r) if handler else r.swap(pattern.category, value)
    if new == value:
        return m.group(0)
    base = m.start()
    whole = m.group(0)
    return whole[: start - base] + new + whole[end - base :]


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
