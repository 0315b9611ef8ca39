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


# Bidirectional embeddings, overrides and isolates reorder what follows them on screen, so a
# name can display as something else ("Trojan Source"); they are dropped, not rendered.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def plain(text: object) -> str:
    """The text with control characters, escape sequences and bidi overrides removed."""
    return _BIDI.sub("", _CONTROL.sub("", str(text)))


def one_line(text: object) -> str:
    """`plain`, with line breaks shown as ⏎: a file name or a message never spans lines."""
    return plain(text).replace("\n", "⏎")
