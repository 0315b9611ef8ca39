"""Redact an incident (folder, archive or file) into a shareable bundle.

Every file is read twice, block by block, so memory stays bounded whatever the size: once
to learn the values met in context, once to write the copy with every value replaced
(scrub.py). Archives are unpacked with the limits `analyze` uses. What cannot be checked is
withheld and listed (binary files, links, refused archive members); what kvdiag does not
understand is copied after the generic categories were applied, and listed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kvdiag.analyzer.discovery import archive
from kvdiag.analyzer.discovery.discover import REDACTION_SUMMARY, SeriesMembers, classify_file
from kvdiag.analyzer.text.source import ReadStats, raw_source, read_head, text_source
from kvdiag.domain.errors import NoInputError
from kvdiag.redact.outputs import BundleWriter
from kvdiag.redact.pseudonyms import Pseudonyms
from kvdiag.redact.scrub import Scrubber

SUMMARY_NAME = REDACTION_SUMMARY
_BLOCK = 4 << 20
_SMALL = 1 << 20  # files below this are read whole and redacted in batches
_HEAD = 65536
_NAMES = "(file and folder names)"  # where replacements in paths are counted
_MAX_NESTING = 3

Progress = Callable[[str, int, int], None]  # (phase, files done, files in all)


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """What happened to one input file. Only the redacted name is ever shown."""

    name: str  # the file's name in the bundle (redacted)
    status: str  # redacted | copied | withheld
    kind: str | None  # what kvdiag reads it as; None: not understood
    why: str = ""


@dataclass(frozen=True, slots=True)
class Redaction:
    """The record of one redaction: what went where, and the pseudonyms used."""

    files: tuple[FileOutcome, ...]
    names: Pseudonyms
    keep: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Input:
    path: Path
    rel: str
    link: bool = False


def _walk(base: Path, scratch: Path, prefix: str = "", depth: int = 0) -> Iterator[_Input]:
    """Every file under `base`, sorted; archives inside are unpacked into `scratch`."""
    for folder, dirs, files in os.walk(base):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            rel = prefix + path.relative_to(base).as_posix()
            if path.is_symlink():
                yield _Input(path, rel, link=True)
            elif depth < _MAX_NESTING and archive.archive_kind(path) is not None:
                state = archive.unpack(path, scratch)
                stem = rel.rsplit(".", 2 if rel.endswith((".tar.gz", ".tar.bz2")) else 1)[0]
                yield from _walk(state.root, scratch, f"{stem}/", depth + 1)
            else:
                yield _Input(path, rel)


def _blocks(path: Path) -> Iterator[str]:
    """The file's text, decompressed and decoded, in blocks that end at a line end."""
    with path.open("rb") as fh:
        src = text_source(raw_source(fh, ReadStats()), ReadStats())
        carry = b""
        while block := src.read(_BLOCK):
            block = carry + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carry = block
                continue
            carry = block[cut:]
            yield block[:cut].decode("utf-8", "surrogateescape")
        if carry:
            yield carry.decode("utf-8", "surrogateescape")


def _withheld(head: bytes, item: _Input) -> str:
    if item.link:
        return "a link: what it points to is not part of the bundle"
    return "binary content: it cannot be checked for what it holds" if b"\0" in head else ""


def _batches(inputs: list[_Input]) -> Iterator[list[_Input]]:
    """Small files together, up to a block's worth; a big file alone (read block by block)."""
    batch: list[_Input] = []
    size = 0
    for item in inputs:
        n = 0 if item.link else item.path.stat().st_size
        if batch and (size + n > _BLOCK or n >= _SMALL):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += n
    if batch:
        yield batch


class _Run:
    """One redaction in progress."""

    def __init__(self, names: Pseudonyms, keep: frozenset[str], progress: Progress | None):
        self.names = names
        self.scrubber = Scrubber(names, keep)
        self.progress = progress
        self.kinds = SeriesMembers()  # a scrape series is sniffed once, not per file

    def _tell(self, phase: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(phase, done, total)

    def learn(self, inputs: list[_Input]) -> None:
        done = 0
        for batch in _batches(inputs):
            self.scrubber.learn("\n".join(item.rel for item in batch))
            readable = [i for i in batch if not _withheld(_head(i), i)]
            if len(readable) == 1:
                for block in _blocks(readable[0].path):
                    self.scrubber.learn(block)
            elif readable:
                self.scrubber.learn("\n".join(_whole(i.path) for i in readable))
            done += len(batch)
            self._tell("learning", done, len(inputs))

    def write(self, inputs: list[_Input], out: BundleWriter) -> list[FileOutcome]:
        outcomes: list[FileOutcome] = []
        used: set[str] = set()
        for batch in _batches(inputs):
            scrubbed = self.scrubber.scrub_many([i.rel for i in batch], [_NAMES] * len(batch))
            names = [self._unique(name, used) for name in scrubbed]
            outcomes += self._batch(batch, names, out)
            self._tell("writing", len(outcomes), len(inputs))
        return outcomes

    @staticmethod
    def _unique(name: str, used: set[str]) -> str:
        stem, n = name, 1
        while name in used or name == SUMMARY_NAME:
            n += 1
            name = f"{stem}.{n}"
        used.add(name)
        return name

    def _batch(self, batch: list[_Input], names: list[str], out: BundleWriter) -> list[FileOutcome]:
        outcomes: dict[int, FileOutcome] = {}
        texts: list[tuple[int, str]] = []
        for k, item in enumerate(batch):
            head = _head(item)
            why = _withheld(head, item)
            if why:
                outcomes[k] = FileOutcome(names[k], "withheld", None, why)
                continue
            kind = self._kind(item, names[k], head)
            outcomes[k] = FileOutcome(names[k], "redacted" if kind else "copied", kind)
            if len(batch) == 1:
                self._stream(item, names[k], out)
            else:
                texts.append((k, _whole(item.path)))
        done = self.scrubber.scrub_many([t for _, t in texts], [names[k] for k, _ in texts])
        for (k, _), text in zip(texts, done, strict=True):
            with out.entry(names[k], batch[k].path.stat().st_mtime) as fh:
                fh.write(text.encode("utf-8", "surrogateescape"))
        return [outcomes[k] for k in range(len(batch))]

    def _kind(self, item: _Input, name: str, head: bytes) -> str | None:
        known = self.kinds.match(name, head[:512])
        ingester = known or classify_file(name, head)[0]
        if ingester is not None and known is None:
            self.kinds.remember(name, head[:512], ingester)
        return ingester.kind if ingester else None

    def _stream(self, item: _Input, name: str, out: BundleWriter) -> None:
        with out.entry(name, item.path.stat().st_mtime) as fh:
            for block in _blocks(item.path):
                fh.write(self.scrubber.scrub(block, name).encode("utf-8", "surrogateescape"))


def _head(item: _Input) -> bytes:
    return b"" if item.link else read_head(item.path, _HEAD)


def _whole(path: Path) -> str:
    return "".join(_blocks(path))


def redact(
    source: Path,
    out: BundleWriter,
    keep: frozenset[str] = frozenset(),
    progress: Progress | None = None,
    names: Pseudonyms | None = None,
) -> Redaction:
    """Write the redacted copy of `source` into `out` (not yet committed).

    `names` shares one pseudonym table between several incidents (`compare --redact`).
    """
    if not source.exists():
        raise NoInputError("no such file or folder", path=source)
    run = _Run(names or Pseudonyms(), keep, progress)
    with tempfile.TemporaryDirectory(prefix="kvdiag-redact-") as scratch:
        inputs, refused = _inputs(source, Path(scratch))
        run.learn(inputs)
        outcomes = run.write(inputs, out)
    outcomes += [
        FileOutcome(run.scrubber.scrub(r, _NAMES), "withheld", None, why) for r, why in refused
    ]
    return Redaction(tuple(outcomes), run.names, keep)


def _inputs(source: Path, scratch: Path) -> tuple[list[_Input], list[tuple[str, str]]]:
    """The files to redact, and the archive members refused (name, why)."""
    if source.is_file() and archive.archive_kind(source) is not None:
        state = archive.unpack(source, scratch)
        refused = [(r.path, f"{r.status}: {r.reason}") for r in state.refused]
        return list(_walk(state.root, scratch)), refused
    if source.is_file():
        return [_Input(source, source.name, link=source.is_symlink())], []
    return list(_walk(source, scratch)), []
