"""Text from inputs is untrusted: strip what could drive a terminal or break a layout."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|\x1b\[[0-9;?]*[ -/]*[@-~]")


def plain(text: object) -> str:
    """The text with control characters and escape sequences removed."""
    return _CONTROL.sub("", str(text))
