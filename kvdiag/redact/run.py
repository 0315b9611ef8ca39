"""The redaction as commands use it: a bundle on disk, or a temporary copy to analyse."""

from __future__ import annotations

import contextlib
import errno
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from kvdiag.domain.errors import NoSpaceError
from kvdiag.redact.bundle import SUMMARY_NAME, Progress, Redaction, redact
from kvdiag.redact.outputs import BundleWriter
from kvdiag.redact.pseudonyms import Pseudonyms
from kvdiag.redact.summary import redacted_md


def default_map_path(target: Path) -> Path:
    """The mapping file beside the bundle (never inside it)."""
    return target.parent / f"{target.name.rstrip('/')}.map.json"


def write_bundle(
    source: Path,
    target: Path,
    keep: frozenset[str] = frozenset(),
    progress: Progress | None = None,
    names: Pseudonyms | None = None,
) -> Redaction:
    """Redact `source` into `target` with its REDACTED.md; nothing is left if it fails."""
    out = BundleWriter(target)
    try:
        redaction = redact(source, out, keep, progress, names)
        with out.entry(SUMMARY_NAME, time.time()) as fh:
            fh.write(redacted_md(redaction).encode("utf-8"))
        out.commit()
    except OSError as exc:
        out.discard()
        if exc.errno == errno.ENOSPC:  # the bundle's disk, or the scratch one (TMPDIR)
            raise NoSpaceError(f"{target}: a disk is full, no bundle written") from exc
        raise
    except BaseException:
        out.discard()
        raise
    return redaction


@contextlib.contextmanager
def redacted_copy(
    source: Path,
    keep: frozenset[str] = frozenset(),
    names: Pseudonyms | None = None,
    progress: Progress | None = None,
) -> Iterator[tuple[Path, Redaction]]:
    """A redacted folder of `source` that lives as long as the `with` block."""
    with tempfile.TemporaryDirectory(prefix="kvdiag-redacted-") as tmp:
        folder = Path(tmp) / "incident"
        redaction = write_bundle(source, folder, keep, progress, names)
        yield folder, redaction
