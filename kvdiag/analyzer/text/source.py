"""Byte streams as UTF-8 text, read block by block; damage is reported, never raised.

- gzip is recognised by content, not by name; a stream cut short or corrupt ends there
  (`ReadStats.truncated`), and concatenated members (`cat a.gz b.gz`) are all read;
- a UTF-8 byte order mark is dropped; UTF-16 with a byte order mark is re-encoded; a
  file that is not UTF-8 but decodes cleanly as GBK (a Chinese Windows console) is read
  as GBK (`ReadStats.encoding`).
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

MAX_LINE_BYTES = 1 << 20  # the text kept of a longer line; the rest is counted, not kept
GZIP_MAGIC = b"\x1f\x8b"
_COMPRESSED_BLOCK = 1 << 20
_HEAD = 65536
# GBK: a head with at least this many invalid UTF-8 sequences, making up at least a
# quarter of its non-ASCII bytes, that decodes as GBK without a single error.
_GBK_MIN_INVALID = 4


@dataclass
class ReadStats:
    """What the reader saw beyond the lines themselves."""

    truncated: str | None = None  # why the stream ended early (corrupt gzip ...)
    encoding: str = "utf-8"
    encoding_note: str | None = None  # why that encoding, when it is not UTF-8
    unterminated: int | None = None  # the last line, when the file ends inside it
    overlong: list[tuple[int, int]] = field(default_factory=list)  # (line, bytes), first few
    overlong_count: int = 0
    lines: int = 0  # lines read so far
    bytes: int = 0  # bytes of text read so far (for progress)

    def problems(self) -> list[tuple[int | None, str]]:
        """(line, message) for each kind of damage seen, for InputProblem rows."""
        out: list[tuple[int | None, str]] = []
        if self.truncated:
            out.append((self.lines or None, self.truncated))
        if self.unterminated is not None and not self.truncated:
            out.append(
                (
                    self.unterminated,
                    f"the file ends inside line {self.unterminated} (no line end): "
                    "it may have been cut short; the partial line was read as it is",
                )
            )
        for line, size in self.overlong:
            out.append(
                (
                    line,
                    f"line {line} is {size:,} bytes long; only its first "
                    f"{MAX_LINE_BYTES:,} bytes were read",
                )
            )
        if self.overlong_count > len(self.overlong):
            more = self.overlong_count - len(self.overlong)
            out.append((None, f"{more} more lines longer than {MAX_LINE_BYTES:,} bytes were cut"))
        return out

    def notes(self) -> list[str]:
        """Notes for the file's account: the encoding, when it was not UTF-8."""
        return [self.encoding_note] if self.encoding_note else []


class Source(Protocol):
    def read(self, n: int) -> bytes: ...


def is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_binary(path: Path) -> BinaryIO:
    """Open a file for reading bytes, decompressing gzip by content, not by name."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


class _Gunzip:
    """gzip members decompressed block by block; damage ends the stream, it never raises."""

    def __init__(self, fh: BinaryIO, stats: ReadStats) -> None:
        self._fh, self._stats = fh, stats
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""
        self._done = False

    def read(self, n: int) -> bytes:
        parts, size = [self._pending], len(self._pending)
        while size < n and not self._done:
            piece = self._more()
            parts.append(piece)
            size += len(piece)
        data = b"".join(parts)
        self._pending = data[n:]
        return data[:n]

    def _more(self) -> bytes:
        block = self._fh.read(_COMPRESSED_BLOCK)
        try:
            if not block:
                self._done = True
                if not self._z.eof:
                    self._stats.truncated = "the gzip stream ends early (the file is cut short)"
                return self._z.flush()
            out = self._z.decompress(block)
            while self._z.eof and self._z.unused_data:  # concatenated members (cat a.gz b.gz)
                rest = self._z.unused_data
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out += self._z.decompress(rest)
            return out
        except zlib.error as exc:
            self._done = True
            self._stats.truncated = f"the gzip stream is damaged, read up to there: {exc}"
            return b""


class _Recode:
    """Text in another encoding, re-encoded as UTF-8 block by block."""

    def __init__(self, src: Source, encoding: str) -> None:
        self._src = src
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")

    def read(self, n: int) -> bytes:
        block = self._src.read(n)
        return self._decoder.decode(block, final=not block).encode("utf-8")


class _Prefixed:
    """A source with bytes already read from it put back in front."""

    def __init__(self, head: bytes, src: Source) -> None:
        self._head, self._src = head, src

    def read(self, n: int) -> bytes:
        if not self._head:
            return self._src.read(n)
        data, self._head = self._head, b""
        return data + self._src.read(max(0, n - len(data)))


def _looks_gbk(head: bytes) -> bool:
    """Not UTF-8 in many places, and GBK without a single error."""
    invalid = head.decode("utf-8", errors="replace").count("\ufffd")
    high = sum(1 for b in head if b > 127) if invalid else 0
    if invalid < _GBK_MIN_INVALID or invalid * 4 < high // 2:
        return False
    try:
        codecs.getincrementaldecoder("gbk")().decode(head)  # a cut last character is fine
    except UnicodeDecodeError:
        return False
    return True


def text_source(raw: Source, stats: ReadStats) -> Source:
    """UTF-8 bytes from a byte stream: byte order marks, UTF-16 and GBK handled."""
    head = raw.read(_HEAD)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        stats.encoding = "utf-16"
        stats.encoding_note = "decoded from UTF-16 (it starts with a byte order mark)"
        return _Recode(_Prefixed(head, raw), "utf-16")
    if head.startswith(codecs.BOM_UTF8):
        return _Prefixed(head[len(codecs.BOM_UTF8) :], raw)
    if _looks_gbk(head):
        stats.encoding = "gbk"
        stats.encoding_note = (
            "decoded as GBK: its first bytes are not UTF-8 in many places and all decode as GBK"
        )
        return _Recode(_Prefixed(head, raw), "gbk")
    return _Prefixed(head, raw)


def raw_source(fh: BinaryIO, stats: ReadStats) -> Source:
    magic = fh.read(2)
    fh.seek(0)
    return _Gunzip(fh, stats) if magic == GZIP_MAGIC else fh


def read_head(path: Path, size: int = _HEAD) -> bytes:
    """The first bytes of a file (decompressed as far as it goes), for sniffing."""
    with path.open("rb") as fh:
        head = raw_source(fh, ReadStats()).read(size)
        if not head:  # not gzip after all (magic then garbage): sniff the bytes themselves
            fh.seek(0)
            head = fh.read(size)
        return head
