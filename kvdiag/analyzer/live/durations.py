"""Durations as people type them ('10m', '5s', '500ms', '1h'), for --duration, --since
and --step. Apart from collect.py so that parsing an option loads no HTTP stack."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """'10m' -> 600.0, '5s', '500ms', '1h'; a bare number is seconds."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a duration like 30s, 10m, 1h or 500ms")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
