"""Unpack incident archives (.tar, .tar.gz/.tgz, .zip) safely into a scratch folder.

Archives come from strangers. A member is refused, and listed with the reason, when its
path is absolute or climbs out (`..`), when it is a link or a device, or when it would
break a limit: member count, total size, or compression ratio (a bomb). Sizes are
enforced while copying, not only from headers, because headers can lie: the member that
breaks the limit is deleted, not left cut short to be read as if whole, and extraction
stops there.
"""

from __future__ import annotations

import lzma
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from kvdiag.domain.errors import ArchiveLimitError
from kvdiag.domain.records.diagnosis import InputRecord


@dataclass(frozen=True, slots=True)
class Limits:
    """What an archive may expand to."""

    max_members: int = 200_000  # a day of 1-s scrapes is 86,400 files
    max_total_bytes: int = 32 << 30
    max_ratio: float = 250.0  # expanded / compressed; text compresses 10-30x, bombs 1000x+


DEFAULT_LIMITS = Limits()


# What a damaged archive raises while it is read: extraction stops there and says why (the
# members already out, the last perhaps cut short, are genuine data). zlib/lzma errors come
# from corrupt compressed data, RuntimeError from an encrypted zip member,
# NotImplementedError from a compression method zipfile lacks, UnicodeDecodeError from a zip
# member name flagged UTF-8 that is not.
_DAMAGED = (
    zipfile.BadZipFile,
    tarfile.TarError,
    OSError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    RuntimeError,
    NotImplementedError,
    UnicodeDecodeError,
)


@dataclass
class Unpacked:
    """Where an archive went, and what was refused."""

    root: Path
    refused: list[InputRecord] = field(default_factory=list)
    members: int = 0
    bytes_out: int = 0
    written: set[str] = field(default_factory=set)  # member paths extracted so far


def archive_kind(path: Path) -> str | None:
    """'zip' or 'tar' by content (a .tar.gz is a tar), else None."""
    if not path.is_file():
        return None
    if zipfile.is_zipfile(path):
        return "zip"
    try:
        if tarfile.is_tarfile(path):
            return "tar"
    except (OSError, EOFError, tarfile.TarError):
        return None
    return None


def _safe_relpath(name: str) -> str | None:
    """The member's path if it stays inside the extraction folder, else None."""
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or not p.parts or ".." in p.parts or ":" in p.parts[0]:
        return None
    return p.as_posix()


def _open_member(state: Unpacked, archive: str, name: str, rel: str) -> IO[bytes] | None:
    """The file a member is written to, or None (refused) when its path cannot take it."""
    if rel in state.written:
        _refuse(state, archive, name, 0, "same path as an earlier member (not overwritten)")
        return None
    dest = state.root / rel
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        out = dest.open("xb")
    except (OSError, ValueError) as exc:  # a file where a folder must be, a name too long ...
        _refuse(state, archive, name, 0, f"cannot be written: {getattr(exc, 'strerror', exc)}")
        return None
    state.written.add(rel)
    return out


def _copy(src: IO[bytes], out: IO[bytes], state: Unpacked, limits: Limits, budget: int) -> None:
    with out:
        while chunk := src.read(1 << 20):
            state.bytes_out += len(chunk)
            if state.bytes_out > budget:
                raise ArchiveLimitError(
                    f"expands beyond {budget:,} bytes (ratio limit {limits.max_ratio:g}:1 "
                    f"or total limit {limits.max_total_bytes:,})"
                )
            out.write(chunk)


def _extract(
    src: IO[bytes],
    state: Unpacked,
    archive: str,
    name: str,
    rel: str,
    limits: Limits,
    budget: int,
) -> None:
    """Copy member `name` out to `rel`; one that breaks a limit is deleted and named."""
    out = _open_member(state, archive, name, rel)
    if out is None:
        return
    try:
        _copy(src, out, state, limits, budget)
    except ArchiveLimitError as exc:  # cut short, it would be read as if it were whole
        (state.root / rel).unlink()
        raise ArchiveLimitError(exc.message, path=f"{archive}!{name}") from None


def _refuse(state: Unpacked, archive: str, name: str, size: int, why: str) -> None:
    state.refused.append(InputRecord(f"{archive}!{name}", "archive member", "refused", why, size))


def _tar_members(tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        try:
            member = tf.next()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ArchiveLimitError(
                f"archive is damaged after the last good member: {exc}"
            ) from exc
        if member is None:
            return
        yield member


def _unpack_tar(path: Path, state: Unpacked, limits: Limits, budget: int) -> None:
    with tarfile.open(path, mode="r:*") as tf:
        for member in _tar_members(tf):
            rel = _safe_relpath(member.name)
            if member.isdir():
                continue
            if rel is None:
                _refuse(
                    state, path.name, member.name, member.size, "path leaves the archive folder"
                )
            elif member.issym() or member.islnk():
                _refuse(
                    state, path.name, member.name, 0, f"link to {member.linkname!r} (not followed)"
                )
            elif not member.isfile():
                _refuse(state, path.name, member.name, 0, "device, fifo or other special file")
            else:
                _count(state, limits)
                src = tf.extractfile(member)
                if src is not None:
                    _extract(src, state, path.name, member.name, rel, limits, budget)


def _unpack_zip(path: Path, state: Unpacked, limits: Limits, budget: int) -> None:
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            rel = _safe_relpath(info.filename)
            mode = info.external_attr >> 16
            if info.is_dir():
                continue
            if rel is None:
                _refuse(
                    state,
                    path.name,
                    info.filename,
                    info.file_size,
                    "path leaves the archive folder",
                )
            elif (mode & 0o170000) == 0o120000:
                _refuse(state, path.name, info.filename, 0, "symbolic link (not followed)")
            elif info.flag_bits & 0x1:
                _refuse(state, path.name, info.filename, 0, "encrypted (no password to read it)")
            elif info.compress_size and info.file_size / info.compress_size > limits.max_ratio:
                ratio = info.file_size / info.compress_size
                _refuse(
                    state,
                    path.name,
                    info.filename,
                    info.file_size,
                    f"compression ratio {ratio:,.0f}:1 (bomb?)",
                )
            else:
                _count(state, limits)
                # Opened first: a member zipfile cannot read leaves no file.
                with zf.open(info) as src:
                    _extract(src, state, path.name, info.filename, rel, limits, budget)


def _count(state: Unpacked, limits: Limits) -> None:
    state.members += 1
    if state.members > limits.max_members:
        raise ArchiveLimitError(f"more than {limits.max_members:,} members")


def unpack(path: Path, scratch: Path, limits: Limits = DEFAULT_LIMITS) -> Unpacked:
    """Extract `path` into a fresh folder under `scratch`; refused members are listed."""
    scratch.mkdir(parents=True, exist_ok=True)
    # A fresh folder per archive: two nested archives may share a name.
    dest = Path(tempfile.mkdtemp(prefix=path.name.replace(".", "_") + "-", dir=scratch))
    state = Unpacked(dest)
    budget = min(limits.max_total_bytes, int(path.stat().st_size * limits.max_ratio) + (1 << 20))
    kind = archive_kind(path)
    try:
        if kind == "zip":
            _unpack_zip(path, state, limits, budget)
        elif kind == "tar":
            _unpack_tar(path, state, limits, budget)
    except ArchiveLimitError as exc:  # a result: the rest of the archive is refused
        where = exc.path or f"{path.name}!*"
        why = f"extraction stopped: {exc.message}"
        state.refused.append(InputRecord(where, "archive member", "refused", why, state.bytes_out))
    except _DAMAGED as exc:
        _refuse(state, path.name, "*", state.bytes_out, f"extraction stopped: {exc}")
    return state


def discard(state: Unpacked) -> None:
    shutil.rmtree(state.root, ignore_errors=True)
