"""Text from inputs is untrusted: strip what could drive a terminal or break a layout."""

from __future__ import annotations

import re

# Whole escape sequences first (CSI such as colours, OSC such as window titles), so that
# their parameters go too; then any other C0/C1 control character (tab and newline stay).
_CONTROL = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def plain(text: object) -> str:
    """The text with control characters and escape sequences removed."""
    return _CONTROL.sub("", str(text))
