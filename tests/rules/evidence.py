"""Evidence must point at real lines: the excerpt is the start of the cited line."""

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
            line = lines[ev["line"] - 1].decode("utf-8", "replace").replace("\r", "")
            expected = ev["excerpt"].rstrip("…").strip()
            assert line.strip().startswith(expected), (finding["code"], ev, line)
