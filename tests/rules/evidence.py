"""Evidence must point at real lines: the excerpt is the start of the cited line.

A record that spans lines (vLLM's multi-line messages, rejoined wrapped lines) is cited at
its first line and its excerpt holds the following lines too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def assert_evidence_points_at_real_lines(incident: Path, doc: dict[str, Any]) -> None:
    """Every finding's evidence names a file of the folder, a line in it, and that line's text."""
    for finding in doc["findings"]:
        for ev in finding["evidence"]:
            path = incident / ev["path"]
            assert path.is_file(), (finding["code"], ev)
            if ev["line"] is None:
                continue
            # Lines end at \n only (a bare \r from a progress bar stays inside its line).
            lines = path.read_bytes().split(b"\n")
            assert 1 <= ev["line"] <= len(lines), (finding["code"], ev)
            # Each line compared without its edge blanks (a wrapped piece may start with one).
            cut = ev["excerpt"].rstrip("…").strip()
            expected = "\n".join(part.strip() for part in cut.split("\n"))
            span = lines[ev["line"] - 1 : ev["line"] - 1 + expected.count("\n") + 1]
            text = "\n".join(b.decode("utf-8", "replace").replace("\r", "").strip() for b in span)
            assert text.startswith(expected), (finding["code"], ev, text)
