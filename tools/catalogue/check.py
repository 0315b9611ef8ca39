"""Run every catalogue row's sample line through its engine's format pack.

The samples go through `parse_batch`, the code path of a real file (as tests/test_formats.py
does for the packs' own samples), one batch per pack; each row gets the set of events its
sample lines parse to.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.logs.steps import lines_frame, parse_batch
from tools.catalogue.samples import sample

PACKS = {"vllm": "vllm_log", "sglang": "sglang_log"}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one row's sample parsed to."""

    sample: str
    events: frozenset[str]  # "pack:event" for every event a line of the sample matched

    @property
    def entry(self) -> str:
        """The single pack entry, '' for none, or the events joined by '+' when several."""
        return "+".join(sorted(self.events))


def _events_by_line(texts: list[str], pack_name: str) -> list[set[str]]:
    """For each text (a sample, possibly several lines), the events its lines parse to,
    all texts in one batch."""
    lines: list[str] = []
    owner: list[int] = []
    for i, text in enumerate(texts):
        pieces = text.split("\n")
        lines += pieces
        owner += [i] * len(pieces)
    found: list[set[str]] = [set() for _ in texts]
    if not lines:
        return found
    parsed = parse_batch(lines_frame(lines), load_pack(pack_name))
    hits = parsed.frame.select("line_no", "event").drop_nulls("event")
    for line_no, event in hits.iter_rows():
        found[owner[line_no - 1]].add(f"{pack_name}:{event}")
    return found


def outcomes(rows: list[dict[str, str]]) -> list[Outcome]:
    """Each row's sample and the pack events it parses to, in row order.

    All samples of a pack go through one batch; a sample that matched anything there is
    parsed again on its own, so a neighbour's line (a wrapped-line repair joins adjacent
    lines) can neither lend it an event nor take one away.
    """
    texts = [sample(row, index) for index, row in enumerate(rows)]
    found: list[set[str]] = [set() for _ in rows]
    for engine, pack_name in PACKS.items():
        picked = [i for i, row in enumerate(rows) if row["engine"] == engine]
        batch = _events_by_line([texts[i] for i in picked], pack_name)
        for i, events in zip(picked, batch, strict=True):
            if events:
                (found[i],) = _events_by_line([texts[i]], pack_name)
    return [Outcome(text, frozenset(events)) for text, events in zip(texts, found, strict=True)]
