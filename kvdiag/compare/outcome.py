"""The outcome of a change, and the sentence that says it with the change that explains it."""

from __future__ import annotations

from kvdiag.compare.quantities import EXPLAINS
from kvdiag.domain.fmt import fmt_quantity, fmt_setting
from kvdiag.domain.records.comparison import LoadComparison, Outcome, Quantity, SettingChange
from kvdiag.domain.records.diagnosis import Diagnosis, IncidentClass

_NOT_PROBLEMS = {IncidentClass.HEALTHY, IncidentClass.INSUFFICIENT_EVIDENCE}


def problems(d: Diagnosis) -> list[IncidentClass]:
    """The problem classes a verdict claims, primary first."""
    return [c for c in d.verdict.classes if c not in _NOT_PROBLEMS]


def decide(
    before: Diagnosis, after: Diagnosis, load: LoadComparison, outcomes: tuple[Quantity, ...]
) -> tuple[Outcome, list[str]]:
    """The outcome and the reasons for it, one sentence each."""
    if not load.comparable:
        return Outcome.NOT_COMPARABLE, list(load.notes)
    for side, d in (("BEFORE", before), ("AFTER", after)):
        if d.verdict.primary is IncidentClass.INSUFFICIENT_EVIDENCE:
            return Outcome.NOT_COMPARABLE, [f"{side}'s evidence reaches no verdict"]
    had, has = problems(before), problems(after)
    new = [c.value for c in has if c not in had]
    gone = [c.value for c in had if c not in has]
    better = [q.name for q in outcomes if q.better == "after"]
    worse = [q.name for q in outcomes if q.better == "before"]
    reasons = _reasons(new, gone, better, worse)
    if new and better and not worse:
        # Named now while every user-facing number improved: more likely unmasked (a queue
        # hidden behind a full pool) than caused by the change.
        reasons.append(
            f"{', '.join(new)} is named only in AFTER, but no user-facing number got worse"
        )
    elif new:
        return Outcome.REGRESSED, reasons
    if had and not has:
        return Outcome.FIXED, reasons
    if worse and not better and not gone:
        return Outcome.REGRESSED, reasons
    if (gone or better) and not worse:
        return Outcome.IMPROVED, reasons
    if had and had[0].value in gone:
        return Outcome.IMPROVED, reasons
    return Outcome.UNCHANGED, reasons


def _reasons(new: list[str], gone: list[str], better: list[str], worse: list[str]) -> list[str]:
    out = []
    if gone:
        out.append(f"gone in AFTER: {', '.join(gone)}")
    if new:
        out.append(f"new in AFTER: {', '.join(new)}")
    if better:
        out.append(f"better beyond noise: {', '.join(better)}")
    if worse:
        out.append(f"worse beyond noise: {', '.join(worse)}")
    if not out:
        out.append("no problem class came or went, and no user-facing number moved beyond noise")
    return out


def explaining(before: Diagnosis, changes: tuple[SettingChange, ...]) -> list[SettingChange]:
    """The changed settings that bear on BEFORE's classes (its primary's first); every
    change when none does."""
    keys: list[str] = []
    for c in problems(before) or [before.verdict.primary]:
        keys += [k for k in EXPLAINS.get(c.value, ()) if k not in keys]
    named = [c for k in keys for c in changes if c.setting == k]
    return named or list(changes)


def change_phrase(c: SettingChange) -> str:
    """ "--kv-cache-memory-bytes 17.0 MiB -> 160 MiB" (the flag when the engine has one)."""
    name = c.flag or c.setting
    return f"`{name}` {fmt_setting(c.setting, c.before)} -> {fmt_setting(c.setting, c.after)}"


def summary(
    outcome: Outcome,
    before: Diagnosis,
    after: Diagnosis,
    load: LoadComparison,
    changes: tuple[SettingChange, ...],
    outcomes: tuple[Quantity, ...],
    reasons: list[str],
) -> str:
    """One sentence: the outcome, at what load, the change that explains it, what moved."""
    if outcome is Outcome.NOT_COMPARABLE:
        return f"not comparable: {'; '.join(reasons)}"
    head = _head(outcome, before, after)
    at = (
        "with no load on either side"
        if all(not q.before and not q.after for q in load.quantities)
        else "at the same load"
        if load.same_load
        else "at a different load, judged per request"
    )
    why = explaining(before, changes)
    cause = f"; {', '.join(change_phrase(c) for c in why[:3])}" if why else "; no setting changed"
    cause = _pool_phrase(before, after) + cause
    moved = [q for q in outcomes if q.better is not None][:3]
    effect = "; " + ", ".join(_moved(q) for q in moved) if moved else ""
    return f"{outcome.value}: {head} {at}{cause}{effect}"


def _pool_phrase(before: Diagnosis, after: Diagnosis) -> str:
    """ "; the pool grew from 8,704 to 81,920 tokens" when it changed size."""
    sizes = [d.facts.get("pool_tokens") for d in (before, after)]
    values = [f.value for f in sizes if f is not None and not isinstance(f, tuple)]
    if len(values) != 2 or values[0] == values[1]:
        return ""
    verb = "grew" if float(values[1]) > float(values[0]) else "shrank"  # type: ignore[arg-type]
    return f"; the pool {verb} from {fmt_quantity(values[0], 'tokens')} to " + fmt_quantity(
        values[1], "tokens"
    )


def _head(outcome: Outcome, before: Diagnosis, after: Diagnosis) -> str:
    had, has = problems(before), problems(after)
    if outcome is Outcome.FIXED:
        return f"{', '.join(c.value for c in had)} gone"
    new = [c.value for c in has if c not in had]
    if new and outcome is Outcome.REGRESSED:
        return f"{', '.join(new)} appeared"
    parts = [f"{had[0].value} {'remains' if had[0] in has else 'gone'}"] if had else []
    parts += [f"{', '.join(new)} named in AFTER"] if new else []
    if parts:
        return ", ".join(parts)
    return f"{before.verdict.primary.value} before and {after.verdict.primary.value} after"


def _moved(q: Quantity) -> str:
    return f"{q.name} {fmt_quantity(q.before, q.unit)} -> {fmt_quantity(q.after, q.unit)}"
