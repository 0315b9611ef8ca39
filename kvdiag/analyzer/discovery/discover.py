"""Find the inputs of an incident folder and decide, by content, what each one is.

Names help but do not decide: a vLLM log saved as `pod-7.txt` is still a vLLM log. Files
that no ingester recognises, empty and binary files are kept as records with a reason,
never dropped. Scrape files sharing a folder become one series.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kvdiag.analyzer.discovery import archive
from kvdiag.analyzer.ingest.base import FileList, Ingester, InputUnit
from kvdiag.analyzer.ingest.packed import PackedStrings
from kvdiag.analyzer.ingest.registry import INGESTERS
from kvdiag.analyzer.text.lines import read_head
from kvdiag.analyzer.text.prefetch import HeadPrefetch
from kvdiag.analyzer.text.source import GZIP_MAGIC
from kvdiag.domain.records.diagnosis import InputRecord

DEFAULT_REPLICA = "default"
# A first-level folder holding one of these is a replica (a scrape log is not a server).
SERVER_LOG_KINDS = frozenset({"vllm_log", "sglang_log", "trtllm_log", "tgi_log"})
# Without any server log, a first-level folder of one server's own scrapes is a replica: a
# fleet saved as one folder of /metrics files per worker (Dynamo's workers, each scraped on
# its own port) has nothing else that tells the workers apart.
SCRAPE_KINDS = frozenset({"prom_text", "trtllm_stats"})
_HEAD_BYTES = 65536
REDACTION_SUMMARY = "REDACTED.md"  # written by `kvdiag redact` into its bundles
_PEEK_BYTES = 512  # enough for the archive test (tar's magic sits at byte 257)


@dataclass(frozen=True, slots=True)
class Discovery:
    """What discovery found: units to ingest, files set aside, and a time anchor."""

    root: Path
    units: tuple[InputUnit, ...]
    set_aside: tuple[InputRecord, ...]
    anchor: datetime | None
    anchor_source: str | None


@dataclass(frozen=True, slots=True)
class _Entry:
    """A file the walk found, with what its directory entry already told."""

    path: str  # a string until a Path is needed: a Path is several times its size
    is_link: bool
    is_file: bool  # a regular file, or a link to one
    size: int


def _walk(root: Path) -> list[_Entry]:
    """Every file under `root` in sorted order (a folder's files, then its folders').

    Directory entries carry the type, and one stat the size: a day of one-second scrapes
    is 86,400 files, too many for pathlib's three stats of each.
    """
    if root.is_file():
        return [_Entry(str(root), root.is_symlink(), True, root.stat().st_size)]
    found: list[_Entry] = []
    _scan(str(root), found)
    return found


def _scan(folder: str, found: list[_Entry]) -> None:
    with os.scandir(folder) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    folders = []
    for e in entries:
        if e.is_dir():  # a link to a folder is not followed (as os.walk does not)
            if not e.is_symlink():
                folders.append(e.path)
            continue
        is_file = e.is_file()
        found.append(_Entry(e.path, e.is_symlink(), is_file, e.stat().st_size if is_file else 0))
    for sub in folders:
        _scan(sub, found)


def _peek(path: str) -> bytes:
    """The first _PEEK_BYTES of a file: one read, or read_head's for a gzip file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        peek = os.read(fd, _PEEK_BYTES)
    finally:
        os.close(fd)
    return read_head(Path(path), _PEEK_BYTES) if peek.startswith(GZIP_MAGIC) else peek


def _is_archive(head: bytes) -> bool:
    """Zip, or tar (possibly gzip-compressed: `read_head` already decompressed it)."""
    return head[:4] == b"PK\x03\x04" or head[257:262] == b"ustar"


def _outside(path: Path, base: Path) -> bool:
    """A symlink whose target lies outside the incident folder."""
    try:
        path.resolve().relative_to(base.resolve())
    except ValueError:
        return True
    return False


def _relative(path: str, prefix: str, base: Path) -> str:
    """`path` relative to `base` (`prefix`: base and a separator), parts joined by `/`.

    Cut from the string when it starts with the prefix, as every path the walk makes does,
    rather than through a Path, relative_to and as_posix for each of thousands of files.
    """
    if path.startswith(prefix):
        rel = path[len(prefix) :]
        return rel if os.sep == "/" else rel.replace(os.sep, "/")
    return Path(path).relative_to(base).as_posix()


def _files(
    root: Path, scratch: Path | None, set_aside: list[InputRecord], depth: int = 0
) -> Iterator[tuple[_Entry, str, bytes]]:
    """(file, relative name, first bytes) of every readable file, archives expanded.

    Only the first _PEEK_BYTES are read here: a series of thousands of scrapes needs no
    more from most of its members (see SeriesMembers), and heads are not all held at once.
    """
    base = root.parent if root.is_file() else root
    prefix = os.path.join(str(base), "")
    entries = _walk(root)
    # Uncached, each peek waits for the disk unless the files are announced ahead.
    prefetch = HeadPrefetch(
        [e.path if e.is_file and not e.is_link else None for e in entries], _HEAD_BYTES
    )
    for k, entry in enumerate(entries):
        prefetch.before(k)
        rel = _relative(entry.path, prefix, base)
        if entry.is_link and _outside(Path(entry.path), base):
            set_aside.append(
                InputRecord(
                    rel,
                    "unknown",
                    "refused",
                    "symbolic link pointing outside the incident folder",
                    0,
                )
            )
            continue
        if not entry.is_file:
            set_aside.append(InputRecord(rel, "unknown", "skipped", "not a regular file", 0))
            continue
        peek = _peek(entry.path) if entry.size else b""
        if _is_archive(peek) and scratch is not None and depth < 2:
            unpacked = archive.unpack(Path(entry.path), scratch)
            set_aside += unpacked.refused
            inner = _files(unpacked.root, scratch, set_aside, depth + 1)
            yield from ((e, f"{rel}/{r}", h) for e, r, h in inner)
            continue
        yield entry, rel, peek


class SeriesMembers:
    """Members of a file series (`metrics/<unix_ts>.prom`) recognised from one member.

    Sniffing reads 64 KB and runs every ingester's patterns, minutes for a day of
    one-second scrapes. A file whose name puts it in the series of a file
    already sniffed (same ingester key) and whose first line is that file's first line
    is of the same kind; anything else is sniffed in full.
    """

    def __init__(self) -> None:
        self._known: dict[str, list[tuple[type[Ingester], str, bytes]]] = defaultdict(list)

    @staticmethod
    def _first_line(peek: bytes) -> bytes:
        return peek.split(b"\n", 1)[0]

    def match(self, rel: str, peek: bytes) -> type[Ingester] | None:
        line = self._first_line(peek)
        for ingester, key, known_line in self._known[rel.rpartition("/")[0]]:
            if line == known_line and ingester.series_key(rel) == key:
                return ingester
        return None

    def remember(self, rel: str, peek: bytes, ingester: type[Ingester]) -> None:
        key = ingester.series_key(rel)
        line = self._first_line(peek)
        folder = self._known[rel.rpartition("/")[0]]
        if key is not None and line and (ingester, key, line) not in folder:
            folder.append((ingester, key, line))


def _head(path: str, peek: bytes) -> bytes:
    """The first _HEAD_BYTES of a file, re-using the peek when it was the whole file."""
    return peek if len(peek) < _PEEK_BYTES else read_head(Path(path), _HEAD_BYTES)


def _decode_head(head: bytes) -> str:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return head.decode("utf-16", errors="replace")
    return head.decode("utf-8-sig", errors="replace")  # without a UTF-8 byte-order mark


def _looks_binary(head: bytes) -> bool:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    sample = head[:8192]
    return bool(sample) and sample.count(0) > len(sample) // 100


def classify_file(rel: str, head: bytes) -> tuple[type[Ingester] | None, str]:
    """The ingester that recognises a file, or None and why not."""
    if not head:
        return None, "empty file"
    if _looks_binary(head):
        return None, "binary content"
    text = _decode_head(head)
    name = rel.rpartition("/")[2]
    if name == REDACTION_SUMMARY and text.startswith("# Redacted by kvdiag"):
        return None, "kvdiag's account of a redaction (what was replaced), not evidence"
    score, best = _best_sniff(name, text)
    if score <= 0:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        return None, f"no known format recognised (first line: {first!r})"
    return best, ""


# Cheap sniffs first, then those that may parse the head, where they still can win.
_SNIFF_ORDER = sorted(range(len(INGESTERS)), key=lambda i: INGESTERS[i].sniff_parses)


def _best_sniff(name: str, text: str) -> tuple[int, type[Ingester]]:
    """The highest score and its ingester (on a tie, the later in INGESTERS)."""
    best = (0, 0)
    for i in _SNIFF_ORDER:
        ing = INGESTERS[i]
        if ing.sniff_parses and (ing.sniff_bound(name, text), i) < best:
            continue  # parsing the head under its pack (~0.1 s) could not change the answer
        best = max(best, (ing.sniff(name, text), i))
    return best[0], INGESTERS[best[1]]


def _replica_of(rel: str, replica_dirs: set[str]) -> str:
    top = rel.split("/", 1)[0]
    return top if top in replica_dirs else DEFAULT_REPLICA


def discover(
    root: Path, scratch: Path | None = None, seen: Callable[[int, int], None] | None = None
) -> Discovery:
    """Walk `root` (a folder, an archive or one file) and classify every file in it.

    Archives are unpacked into `scratch` (nothing is unpacked without one). `seen` is told
    (files, bytes) after each file, for progress.
    """
    base = root.parent if root.is_file() else root
    set_aside: list[InputRecord] = []
    groups: dict[tuple[str, str], list[tuple[str, str, int]]] = defaultdict(list)
    anchor: datetime | None = None
    anchor_source: str | None = None
    if scratch is not None and archive.archive_kind(root) is not None:
        unpacked = archive.unpack(root, scratch)
        set_aside += unpacked.refused
        root = base = unpacked.root
    series = SeriesMembers()
    quotes: list[tuple[str, str, tuple[str, str, int]]] = []
    looked_at = 0
    for n, (entry, rel, peek) in enumerate(_files(root, scratch, set_aside), 1):
        looked_at += entry.size
        if seen is not None:
            seen(n, looked_at)
        path = entry.path
        ingester, why, hint, source, quoting = _recognise(path, rel, peek, series)
        if ingester is None:
            set_aside.append(_set_aside(entry, rel, why))
            continue
        limit = ingester.max_bytes
        if limit is not None and entry.size > limit:
            why = f"{entry.size:,} bytes: over the {limit:,}-byte limit for a file read whole"
            set_aside.append(InputRecord(rel, ingester.kind, "skipped", why, entry.size))
            continue
        key = ingester.series_key(rel) or rel
        if quoting:
            quotes.append((ingester.kind, key, (path, rel, entry.size)))
            continue
        groups[(ingester.kind, key)].append((path, rel, entry.size))
        if hint is not None and (anchor is None or hint < anchor):
            anchor, anchor_source = hint, source
    set_aside += _place_quotes(quotes, groups)
    replica_dirs = _replica_dirs(groups)
    units = tuple(
        _unit(kind, key, members, replica_dirs) for (kind, key), members in sorted(groups.items())
    )
    return Discovery(base, units, tuple(set_aside), anchor, anchor_source)


def _recognise(
    path: str, rel: str, peek: bytes, series: SeriesMembers
) -> tuple[type[Ingester] | None, str, datetime | None, str, bool]:
    """(the file's ingester or None, why not, the time it gives, where that time is from,
    whether the file only quotes that kind's messages)."""
    known = series.match(rel, peek)
    if known is not None and (hint := known.time_hint(rel)) is not None:
        return known, "", hint, "scrape file names", False
    head = _head(path, peek)  # to sniff, or for a time in the content
    ingester, why = (known, "") if known is not None else classify_file(rel, head)
    if ingester is None:
        return None, why, None, "", False
    series.remember(rel, peek, ingester)
    if (hint := ingester.time_hint(rel)) is not None:
        return ingester, "", hint, "scrape file names", False
    text = _decode_head(head)
    quoting = ingester.quotes(rel.rpartition("/")[2], text)
    return ingester, "", ingester.content_time_hint(text), f"times in {rel}", quoting


def _place_quotes(
    quotes: list[tuple[str, str, tuple[str, str, int]]],
    groups: dict[tuple[str, str], list[tuple[str, str, int]]],
) -> list[InputRecord]:
    """Files that only quote a log's messages (notes, a ticket) are read when they are all
    the incident has of that log; beside the log itself they are set aside, so that its
    lines, not their quotes, are the evidence."""
    aside = []
    logs = {kind: rel for (kind, _), members in groups.items() for _, rel, _ in members}
    for kind, key, (path, rel, size) in quotes:
        if kind in logs:
            why = f"quotes {kind} messages without their headers; {logs[kind]} holds the log itself"
            aside.append(InputRecord(rel, kind, "skipped", why, size))
        else:
            groups[(kind, key)].append((path, rel, size))
    return aside


def _set_aside(entry: _Entry, rel: str, why: str) -> InputRecord:
    status = "skipped" if why in ("empty file", "binary content") else "unrecognised"
    return InputRecord(rel, "unknown", status, why, entry.size)


def _replica_dirs(groups: dict[tuple[str, str], list[tuple[str, str, int]]]) -> set[str]:
    """First-level folders that each hold a server's log, one replica each when there are two+;
    without a server log anywhere, first-level folders of scrapes."""
    with_logs = _tops_holding(groups, SERVER_LOG_KINDS)
    if len(with_logs) >= 2:
        return with_logs
    if any(kind in SERVER_LOG_KINDS for kind, _ in groups):
        return set()
    with_scrapes = _tops_holding(groups, SCRAPE_KINDS)
    return with_scrapes if len(with_scrapes) >= 2 else set()


def _tops_holding(
    groups: dict[tuple[str, str], list[tuple[str, str, int]]], kinds: frozenset[str]
) -> set[str]:
    """First-level folders holding an input of one of these kinds."""
    return {
        rel.split("/", 1)[0]
        for (kind, _), members in groups.items()
        if kind in kinds
        for _, rel, _ in members
        if "/" in rel
    }


def _unit(
    kind: str, key: str, members: list[tuple[str, str, int]], replica_dirs: set[str]
) -> InputUnit:
    members.sort(key=lambda m: m[1])
    files = FileList(p for p, _, _ in members)
    rels = PackedStrings(r for _, r, _ in members)
    rel = key if len(members) > 1 else rels[0]
    size = sum(n for _, _, n in members)
    return InputUnit(kind, rel, files, rels, size, _replica_of(rels[0], replica_dirs))
