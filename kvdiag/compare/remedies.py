"""Each remedy kvdiag proposed for BEFORE, checked against AFTER's settings and verdict.

A remedy that names a flag ("--max-num-seqs 3", "--kv-cache-memory-bytes 148M") is read
as the engine reads the flag; it counts as applied when AFTER's value is the proposed one
or lies past it in the direction BEFORE -> proposed, and as not applied when AFTER kept
BEFORE's value. Prose remedies ("route long and short traffic apart") cannot be read from
settings: applied stays None.
"""

from __future__ import annotations

import re

from kvdiag.analyzer.model.stated import Stated
from kvdiag.domain.records.comparison import RemedyCheck
from kvdiag.domain.records.diagnosis import Diagnosis, Finding, IncidentClass, Remedy
from kvdiag.domain.settings import engine_settings, normalise

_FLAG = re.compile(r"^\s*(--[a-z][a-z0-9_-]*)(?:[ =]([^\s;(]+))?")


def check_remedies(
    before: Diagnosis,
    after: Diagnosis,
    settings_before: dict[str, Stated],
    settings_after: dict[str, Stated],
    engine: str,
) -> tuple[RemedyCheck, ...]:
    gone = _classes(before) - _classes(after)
    return tuple(
        _check(f, r, settings_before, settings_after, engine, gone)
        for f in before.findings
        if f.claimed
        for r in f.remediation
    )


def _classes(d: Diagnosis) -> set[IncidentClass]:
    return set(d.verdict.classes) - {IncidentClass.HEALTHY, IncidentClass.INSUFFICIENT_EVIDENCE}


def _check(
    f: Finding,
    r: Remedy,
    before: dict[str, Stated],
    after: dict[str, Stated],
    engine: str,
    gone: set[IncidentClass],
) -> RemedyCheck:
    key, proposed = _proposal(r.action, engine)
    b = before.get(key) if key else None
    a = after.get(key) if key else None
    applied = _applied(b.value if b else None, a.value if a else None, proposed) if key else None
    effect = _effect(f, applied, gone)
    if applied and proposed and a is not None and a.value != proposed:
        effect = f"{a.value} where {proposed} was proposed; " + effect
    return RemedyCheck(
        f.code,
        r.action,
        r.rationale,
        key,
        proposed,
        b.value if b else None,
        a.value if a else None,
        applied,
        effect,
    )


def _proposal(action: str, engine: str) -> tuple[str | None, str | None]:
    """(canonical key, proposed value as the config table states it) of a flag remedy."""
    m = _FLAG.match(action)
    table = engine_settings().get(engine)
    if m is None or table is None:
        return None, None
    spec = table.by_flag(m.group(1))
    if spec is None:
        return None, None
    value = m.group(2)
    return spec.key, normalise(spec, value) if value else None


def _as_float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _applied(before: str | None, after: str | None, proposed: str | None) -> bool | None:
    if after is None:
        return None
    if before is not None and after == before:
        return False
    if proposed is None or after == proposed:
        return before != after
    b, a, p = _as_float(before), _as_float(after), _as_float(proposed)
    if a is None or p is None:
        return False
    if b is None:
        return a == p
    return (p - b) * (a - b) > 0  # moved the proposed way (the effect says how far)


def _effect(f: Finding, applied: bool | None, gone: set[IncidentClass]) -> str:
    target = f.implies.value if f.implies else f.code
    if f.implies is not None and f.implies in gone:
        outcome = f"{target} is gone in AFTER"
    else:
        outcome = f"{target} remains in AFTER" if f.implies else "see AFTER's findings"
    if applied is None:
        return f"not a setting kvdiag can read; {outcome}"
    return f"{'applied' if applied else 'not applied'}; {outcome}"
