"""Stable pseudonyms: the same value gets the same name in every file (`ip-1`, `host-2`).

Numbers are given in the order values are first met, and files are read in sorted order,
so the same incident redacts to the same bundle every time. The table is what the owner's
local mapping file holds; it never goes into the bundle.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from pathlib import Path

# What a pseudonym looks like: a later pattern must leave it alone.
PSEUDONYM = re.compile(r"^(?:ip|host|model|user|secret|email|req)-\d+$|^\[prompt-\d+, \d+ chars\]$")
# Placeholders people already put where a value was, and values that are no value.
_NO_VALUE = re.compile(
    r"^(?:none|null|nil|true|false|auto|default|undefined|n/a|\*+|x+|\.\.\.|<[^>]*>|\$\{?\w+\}?"
    r"|redacted|\[redacted\]|your[-_]?\w*|changeme)$",
    re.IGNORECASE,
)
_PREFIX = {"request_id": "req", "prompt": "prompt"}
# A value learned in one place is replaced everywhere only when it cannot be a plain word of
# the logs themselves: `worker` as a host name must not eat `RayWorkerWrapper`'s messages.
_LEARN_MIN_PLAIN = 12
_LEARN_MIN = 4


def is_value(text: str) -> bool:
    """A real value (not empty, not a placeholder, not already a pseudonym)."""
    return bool(text) and not _NO_VALUE.match(text) and not PSEUDONYM.match(text)


def learnable(text: str) -> bool:
    """Safe to replace wherever it appears: long enough, and not a plain word."""
    if len(text) < _LEARN_MIN or text.isdigit():
        return False
    return len(text) >= _LEARN_MIN_PLAIN or not text.isalpha()


class Pseudonyms:
    """category -> original -> pseudonym, with counts of replacements per file."""

    def __init__(self) -> None:
        self._names: dict[str, dict[str, str]] = defaultdict(dict)
        self.learned: dict[str, str] = {}  # original -> category, for the literal pass
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)  # file -> category -> n

    def name(self, category: str, original: str) -> str:
        """The pseudonym of `original` in `category`, made on first use."""
        table = self._names[category]
        found = table.get(original)
        if found is None:
            found = f"{_PREFIX.get(category, category)}-{len(table) + 1}"
            table[original] = found
        return found

    def learn(self, category: str, original: str) -> None:
        if learnable(original):
            self.learned.setdefault(original, category)

    def count(self, rel: str, category: str) -> None:
        self.counts[rel][category] += 1

    def distinct(self, category: str) -> int:
        return len(self._names.get(category, {}))

    def originals(self) -> dict[str, dict[str, str]]:
        """category -> pseudonym -> original: what the mapping file holds."""
        return {
            cat: {pseudo: orig for orig, pseudo in table.items()}
            for cat, table in sorted(self._names.items())
            if table
        }

    def write_map(self, path: Path, source: str) -> None:
        """The owner's key back to the originals: private (0600), never in the bundle."""
        payload = {
            "kvdiag_redaction_map": 1,
            "source": source,
            "note": "Keep this file private: it turns the bundle's pseudonyms back into the "
            "original values.",
            "categories": self.originals(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
