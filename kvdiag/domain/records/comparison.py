"""The comparison record: two analyses side by side and what the change did.

Every output format of `kvdiag compare` is a view of one `BeforeAfter`, as every format of
`analyze` is a view of one Diagnosis. Records are frozen; `to_dict()` is the canonical,
JSON-ready form (schema: kvdiag/reports/schema/compare.schema.json).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from kvdiag.domain.records.diagnosis import Diagnosis, Scalar, Series, _plain

COMPARE_SCHEMA_VERSION = "1.0"


class Outcome(enum.StrEnum):
    """What the change did, at a comparable load."""

    FIXED = "fixed"  # BEFORE's problem class is gone
    IMPROVED = "improved"  # still there, or none was, but the user-facing numbers got better
    UNCHANGED = "unchanged"
    REGRESSED = "regressed"  # a new problem class, or a user-facing number worse beyond noise
    NOT_COMPARABLE = "not_comparable"  # the two runs cannot be compared (say why)

    @property
    def rank(self) -> int:
        """Worse outcomes rank higher (for --fail-on)."""
        return _OUTCOME_RANK[self]


_OUTCOME_RANK = {
    Outcome.FIXED: 0,
    Outcome.IMPROVED: 0,
    Outcome.UNCHANGED: 1,
    Outcome.NOT_COMPARABLE: 1,
    Outcome.REGRESSED: 2,
}


@dataclass(frozen=True, slots=True)
class Quantity:
    """One quantity of both runs.

    `change`: after / before as a ratio when both are positive numbers, else None.
    `better`: "after", "before" or None (no difference beyond noise, or no direction is
    better for the user, or a side lacks the number). `source_*`: where each was read.
    """

    name: str
    before: Scalar
    after: Scalar
    unit: str | None
    change: float | None = None
    better: str | None = None
    source_before: str = ""
    source_after: str = ""


@dataclass(frozen=True, slots=True)
class LoadComparison:
    """Was it the same load? `comparable`: can the outcomes be compared at all.
    `same_load`: every load quantity within `tolerance` (relative); when not, outcomes are
    judged per unit of load and `notes` say by how much and in which direction it differed."""

    comparable: bool
    same_load: bool
    tolerance: float
    quantities: tuple[Quantity, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SettingChange:
    """A setting whose value differs, with where each value came from."""

    setting: str
    before: str | None
    after: str | None
    source_before: str
    source_after: str
    flag: str | None = None  # the engine's flag for it, e.g. "--kv-cache-memory-bytes"


@dataclass(frozen=True, slots=True)
class LayerChange:
    """One reconciliation layer of both runs: its status in each and its quantities."""

    layer: int
    title: str
    status_before: str
    status_after: str
    conclusion_before: str
    conclusion_after: str
    quantities: tuple[Quantity, ...]


@dataclass(frozen=True, slots=True)
class RemedyCheck:
    """A remedy kvdiag proposed for BEFORE, checked against AFTER.

    `applied`: True when AFTER's setting moved to (or past) what was proposed, False when it
    did not move, None when the remedy is not a setting kvdiag can read in both runs.
    """

    code: str
    action: str
    rationale: str
    setting: str | None
    proposed: str | None
    before: str | None
    after: str | None
    applied: bool | None
    effect: str


@dataclass(frozen=True, slots=True)
class Side:
    """One run: its analysis, and its load start (the overlay charts' zero)."""

    label: str
    diagnosis: Diagnosis
    load_start: str | None  # ISO time the load began: first request sent or first busy sample

    def to_dict(self) -> dict[str, Any]:
        d = self.diagnosis
        return {
            "incident": self.label,
            "verdict": _plain(d.verdict),
            "facts": {k: _plain(v) for k, v in sorted(d.facts.items())},
            "inputs": _plain(d.inputs),
            "window": _plain(d.window),
            "load_start": self.load_start,
            "series": _plain(d.series),
        }

    @property
    def series(self) -> tuple[Series, ...]:
        return self.diagnosis.series


@dataclass(frozen=True, slots=True)
class BeforeAfter:
    """The one record every compare renderer reads."""

    before: Side
    after: Side
    load: LoadComparison
    changes: tuple[SettingChange, ...]
    layers: tuple[LayerChange, ...]
    outcomes: tuple[Quantity, ...]  # the user-facing numbers, per unit of load when it differed
    remedies: tuple[RemedyCheck, ...]
    outcome: Outcome
    summary: str
    reasons: tuple[str, ...]  # why this outcome: each sentence a piece of the argument
    kvdiag_version: str = ""
    schema_version: str = COMPARE_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON-ready form (keys stable; see compare.schema.json)."""
        return {
            "schema_version": self.schema_version,
            "kvdiag_version": self.kvdiag_version,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "load": _plain(self.load),
            "changes": _plain(self.changes),
            "layers": _plain(self.layers),
            "outcomes": _plain(self.outcomes),
            "remedies": _plain(self.remedies),
            "outcome": self.outcome.value,
            "summary": self.summary,
            "reasons": list(self.reasons),
        }
