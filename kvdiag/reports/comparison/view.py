"""What the compare reports show, derived from the BeforeAfter record alone (formatted,
not escaped: each renderer escapes for its own syntax)."""

from __future__ import annotations

from dataclasses import dataclass

from kvdiag.domain.fmt import fmt_quantity, fmt_setting, fmt_value
from kvdiag.domain.records.comparison import (
    BeforeAfter,
    Outcome,
    Quantity,
    RemedyCheck,
    SettingChange,
)
from kvdiag.domain.records.diagnosis import Scalar

OUTCOME_TONE = {
    Outcome.FIXED: "ok",
    Outcome.IMPROVED: "ok",
    Outcome.UNCHANGED: "warn",
    Outcome.NOT_COMPARABLE: "warn",
    Outcome.REGRESSED: "bad",
}
BETTER_WORDS = {"after": "better", "before": "worse", None: ""}


@dataclass(frozen=True, slots=True)
class QuantityRow:
    name: str
    before: str
    after: str
    change: str
    verdict: str  # "better" | "worse" | ""
    sources: str


def change_text(q: Quantity) -> str:
    """ "x 0.5" for a ratio, "=" when equal, "" when it cannot be said."""
    if q.before == q.after and q.before is not None:
        return "="
    if q.change is None:
        return ""
    return f"x {q.change:.3g}"


def _sources(q: Quantity) -> str:
    if q.source_before == q.source_after:
        return q.source_before
    return f"{q.source_before or '—'} | {q.source_after or '—'}"


def _shown(value: Scalar, unit: str | None) -> str:
    """A number with its unit; a word ("off") as it is."""
    return fmt_value(value) if isinstance(value, str) else fmt_quantity(value, unit)


def quantity_rows(quantities: tuple[Quantity, ...]) -> list[QuantityRow]:
    return [
        QuantityRow(
            q.name,
            _shown(q.before, q.unit),
            _shown(q.after, q.unit),
            change_text(q),
            BETTER_WORDS[q.better],
            _sources(q),
        )
        for q in quantities
    ]


def setting_name(c: SettingChange) -> str:
    return f"{c.setting} ({c.flag})" if c.flag else c.setting


def setting_value(c: SettingChange, value: str | None) -> str:
    return fmt_setting(c.setting, value, exact=True)


def applied_word(r: RemedyCheck) -> str:
    return {True: "applied", False: "not applied", None: "cannot tell"}[r.applied]


def load_sentence(r: BeforeAfter) -> str:
    """Whether the loads compare, in words."""
    tol = f"{r.load.tolerance:.0%}"
    if not r.load.comparable:
        return "The two runs cannot be compared."
    if all(not q.before and not q.after for q in r.load.quantities):
        return "No load on either side: only the configuration and the start-up compare."
    if r.load.same_load and any("closed loop" in n for n in r.load.notes):
        return (
            f"The same offered load: as many requests in flight, lengths within {tol}; "
            "the arrival rate followed the server's pace."
        )
    if r.load.same_load:
        return f"The same load: requests, arrival rate and lengths agree within {tol}."
    return (
        f"Not the same load (beyond {tol}): the outcome is judged per request arrived, "
        "not on raw totals."
    )


def verdict_line(r: BeforeAfter, which: str) -> str:
    side = r.before if which == "before" else r.after
    v = side.diagnosis.verdict
    return f"{v.primary.value} ({v.confidence.value})"
