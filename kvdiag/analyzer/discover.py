"""Find the inputs of an incident folder and decide, by content, what each one is.

Names help but do not decide: a vLLM log saved as `pod-7.txt` is still a vLLM log. Files
that no ingester recognises, empty and binary files are kept as records with a reason,
never dropped. Scrape files sharing a folder become one series.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kvdiag.analyzer import archive
from kvdiag.analyzer.ingest import INGESTERS
from kvdiag.analyzer.ingest.base import Ingester, InputUnit
from kvdiag.analyzer.ingest.lines import read_head
from kvdiag.analyzer.model import InputRecord

DEFAULT_REPLICA = "default"
# A first-level folder holding one of these is a replica (a scrape log is not a server).
SERVER_LOG_KINDS = frozenset({"vllm_log", "sglang_log"})
_HEAD_BYTES = 65536


@dataclass(frozen=True, slots=True)
class Discovery:
    """What discovery found: units to ingest, files set aside, and a time anchor."""

    root: Path
    units: tuple[InputUnit, ...]
    set_aside: tuple[InputRecord, ...]
    anchor: datetime | None
    anchor_source: str | None


def _walk(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        found += [Path(folder) / f for f in sorted(files)]
    return found


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


def _files(
    root: Path, scratch: Path | None, set_aside: list[InputRecord], depth: int = 0
) -> list[tuple[Path, str, bytes]]:
    """(path, relative name, head) of every readable file, archives expanded into scratch."""
    base = root.parent if root.is_file() else root
    out: list[tuple[Path, str, bytes]] = []
    for path in _walk(root):
        rel = path.relative_to(base).as_posix()
        if path.is_symlink() and _outside(path, base):
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
        if not path.is_file():
            set_aside.append(InputRecord(rel, "unknown", "skipped", "not a regular file", 0))
            continue
        head = read_head(path, _HEAD_BYTES) if path.stat().st_size else b""
        if _is_archive(head) and scratch is not None and depth < 2:
            unpacked = archive.unpack(path, scratch)
            set_aside += unpacked.refused
            inner = _files(unpacked.root, scratch, set_aside, depth + 1)
            out += [(p, f"{rel}/{r}", h) for p, r, h in inner]
            continue
        out.append((path, rel, head))
    return out


def _decode_head(head: bytes) -> str:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return head.decode("utf-16", errors="replace")
    return head.decode("utf-8", errors="replace")


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
    scored = sorted(
        ((ing.sniff(name, text), i, ing) for i, ing in enumerate(INGESTERS)), reverse=True
    )
    score, _, best = scored[0]
    if score <= 0:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        return None, f"no known format recognised (first line: {first!r})"
    return best, ""


def _replica_of(rel: str, replica_dirs: set[str]) -> str:
    top = rel.split("/", 1)[0]
    return top if top in replica_dirs else DEFAULT_REPLICA


def discover(root: Path, scratch: Path | None = None) -> Discovery:
    """Walk `root` (a folder, an archive or one file) and classify every file in it.

    Archives are unpacked into `scratch` (nothing is unpacked without one).
    """
    base = root.parent if root.is_file() else root
    set_aside: list[InputRecord] = []
    groups: dict[tuple[str, str], list[tuple[Path, str]]] = defaultdict(list)
    anchor: datetime | None = None
    anchor_source: str | None = None
    if scratch is not None and archive.archive_kind(root) is not None:
        unpacked = archive.unpack(root, scratch)
        set_aside += unpacked.refused
        root = base = unpacked.root
    for path, rel, head in _files(root, scratch, set_aside):
        size = path.stat().st_size
        ingester, why = classify_file(rel, head)
        if ingester is None:
            status = "skipped" if why in ("empty file", "binary content") else "unrecognised"
            set_aside.append(InputRecord(rel, "unknown", status, why, size))
            continue
        if ingester.max_bytes is not None and size > ingester.max_bytes:
            why = (
                f"{size:,} bytes: over the {ingester.max_bytes:,}-byte limit for a file read whole"
            )
            set_aside.append(InputRecord(rel, ingester.kind, "skipped", why, size))
            continue
        key = ingester.series_key(rel) or rel
        groups[(ingester.kind, key)].append((path, rel))
        hint, source = ingester.time_hint(rel), "scrape file names"
        if hint is None:
            hint, source = ingester.content_time_hint(_decode_head(head)), f"times in {rel}"
        if hint is not None and (anchor is None or hint < anchor):
            anchor, anchor_source = hint, source
    replica_dirs = _replica_dirs(groups)
    units = tuple(
        _unit(kind, key, members, replica_dirs) for (kind, key), members in sorted(groups.items())
    )
    return Discovery(base, units, tuple(set_aside), anchor, anchor_source)


def _replica_dirs(groups: dict[tuple[str, str], list[tuple[Path, str]]]) -> set[str]:
    """First-level folders that each hold inputs: one replica per folder when there are two+."""
    tops = {rel.split("/", 1)[0] for members in groups.values() for _, rel in members if "/" in rel}
    with_logs = {
        t
        for (kind, _), members in groups.items()
        for _, rel in members
        if "/" in rel and (t := rel.split("/", 1)[0]) in tops and kind in SERVER_LOG_KINDS
    }
    return with_logs if len(with_logs) >= 2 else set()


def _unit(
    kind: str, key: str, members: list[tuple[Path, str]], replica_dirs: set[str]
) -> InputUnit:
    members.sort(key=lambda m: m[1])
    files = tuple(p for p, _ in members)
    rels = tuple(r for _, r in members)
    rel = key if len(members) > 1 else rels[0]
    size = sum(p.stat().st_size for p in files)
    return InputUnit(kind, rel, files, rels, size, _replica_of(rels[0], replica_dirs))
