"""Where a redacted bundle goes: a folder, a tar (gzip-compressed or not) or a zip.

Each is written under a temporary name beside the target and renamed when complete, so an
interrupted run leaves no half bundle. Files keep their modification times: the analysis
reads a vLLM log's year from its file date when nothing else gives it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_SPOOL_BYTES = 8 << 20  # a tar member's size is written before it: spool, to disk past this


def output_kind(path: Path) -> str:
    """'tar.gz', 'tar', 'zip' or 'dir', from the name the user gave."""
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    if name.endswith(".tar"):
        return "tar"
    if name.endswith(".zip"):
        return "zip"
    return "dir"


class BundleWriter:
    """Entries of one bundle, written to a temporary name, renamed by `commit`."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.kind = output_kind(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        prefix = f".{target.name}.partial-"
        if self.kind == "dir":
            self._tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
            self._tar: tarfile.TarFile | None = None
            self._zip: zipfile.ZipFile | None = None
            return
        fd, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
        os.close(fd)
        self._tmp = Path(name)
        self._tar = None
        self._zip = None
        if self.kind == "zip":
            self._zip = zipfile.ZipFile(self._tmp, "w", zipfile.ZIP_DEFLATED, allowZip64=True)
        else:
            self._tar = (
                # level 6, not tarfile's 9: twice as fast on a vLLM log, for a bundle 7 % larger
                tarfile.open(self._tmp, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT)  # noqa: SIM115
                if self.kind == "tar.gz"
                else tarfile.open(self._tmp, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
            )

    @contextlib.contextmanager
    def entry(self, rel: str, mtime: float) -> Iterator[IO[bytes]]:
        """A file of the bundle at `rel` (POSIX, relative), open for writing bytes."""
        if self._zip is not None:
            stamp = time.localtime(max(mtime, 315532800))[:6]  # zip dates start in 1980
            info = zipfile.ZipInfo(rel, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            with self._zip.open(info, "w", force_zip64=True) as fh:
                yield fh
            return
        if self._tar is not None:
            with tempfile.SpooledTemporaryFile(_SPOOL_BYTES) as spool:
                yield spool
                member = tarfile.TarInfo(rel)
                member.size, member.mtime, member.mode = spool.tell(), int(mtime), 0o644
                spool.seek(0)
                self._tar.addfile(member, spool)
            return
        path = self._tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            yield fh
        os.utime(path, (mtime, mtime))

    def commit(self) -> None:
        self._close()
        if self.kind == "dir":
            if self.target.is_dir():
                self.target.rmdir()  # only an empty folder was accepted as a target
            self._tmp.rename(self.target)
            return
        os.chmod(self._tmp, 0o644)
        os.replace(self._tmp, self.target)

    def discard(self) -> None:
        self._close()
        if self._tmp.is_dir():
            shutil.rmtree(self._tmp, ignore_errors=True)
        else:
            self._tmp.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None
        if self._tar is not None:
            self._tar.close()
            self._tar = None
