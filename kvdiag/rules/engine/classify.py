"""From findings to a verdict: primary class, contributing classes, confidence, ruled out.

A pure function with a declared precedence: causes outrank the symptoms they produce (a
shrunken pool or a prefill peak explains saturation, not the other way round). Only
findings at warning or above can be primary; info findings of a problem class contribute,
unless the rule did not claim the class (`Finding.claimed`: the evidence does not reach its
line), which only explains an open verdict.
`healthy` needs the headroom rule's positive finding; anything less is
`insufficient_evidence`, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvdiag.domain.records.diagnosis import (
    Confidence,
    Doubt,
    Extent,
    Fact,
    Finding,
    IncidentClass,
    MissingEvidence,
    RuledOut,
    Severity,
    Verdict,
)
from kvdiag.rules.engine.missing import affected_layers

# Earlier = more fundamental. The primary is the earliest class among warning+ findings.
PRECEDENCE: tuple[IncidentClass, ...] = (
    IncidentClass.UNSERVABLE_CONFIG,
    IncidentClass.MEMORY_OVERCOMMIT,
    IncidentClass.GPU_IMBALANCE,
    IncidentClass.SHRUNKEN_POOL,
    IncidentClass.REPLICA_IMBALANCE,
    IncidentClass.PREFILL_PEAK,
    IncidentClass.PADDING_WASTE,
    IncidentClass.SATURATION,
    IncidentClass.ADMISSION_LIMITED,
)
_NOT_A_PROBLEM = (None, IncidentClass.HEALTHY)
# How long a finding's condition must have held to count as more than a burst (several of
# the engines' 5-10 s stats intervals), and as sustained (what an alert's customary
# `for: 5m` would have fired on). Between the two, or with no span measured, the extent
# neither adds nor takes away.
BRIEF_SECONDS = 60.0
SUSTAINED_SECONDS = 300.0
_LOWER = {Confidence.HIGH: Confidence.MEDIUM, Confidence.MEDIUM: Confidence.LOW}


def _rank(cls: IncidentClass | None) -> int:
    return PRECEDENCE.index(cls) if cls in PRECEDENCE else len(PRECEDENCE)


def _value(facts: Mapping[str, Fact | tuple[Fact, ...]], name: str) -> float | None:
    fact = facts.get(name)
    if isinstance(fact, Fact) and isinstance(fact.value, int | float):
        return float(fact.value)
    if isinstance(fact, tuple):
        values = [float(f.value) for f in fact if isinstance(f.value, int | float)]
        return max(values) if values else None
    return None


def _source_kinds(finding: Finding) -> set[str]:
    """Independent witnesses: a scrape folder counts once, each log file once."""
    return {e.path.split("/", 1)[0] if "/" in e.path else e.path for e in finding.evidence}


def extent_term(extent: Extent | None) -> int:
    """What the extent of the primary's condition adds to the confidence score.

    -1 for a condition seen once, or over less than `BRIEF_SECONDS` (a burst the engine may
    have absorbed); +1 when it held for `SUSTAINED_SECONDS` or more, seen at least three
    times; 0 otherwise: between the two, with no span measured (lines without time, one
    line carrying the engine's count of many events), or a rule that measures no extent.
    """
    if extent is None:
        return 0
    if extent.observations <= 1:
        return -1
    if extent.seconds is None:
        return 0
    if extent.seconds < BRIEF_SECONDS:
        return -1
    return 1 if extent.seconds >= SUSTAINED_SECONDS and extent.observations >= 3 else 0


def confidence(
    primary: Finding, findings: Sequence[Finding], missing: Sequence[MissingEvidence]
) -> Confidence:
    """Rises with independent sources, corroborating findings, an error-grade finding and a
    sustained condition; falls with each missing input the primary's layer needed and with a
    condition seen only once or briefly (`extent_term`)."""
    corroborating = sum(1 for f in findings if f is not primary and f.implies == primary.implies)
    gaps = sum(1 for m in missing if primary.layer in affected_layers(m))
    decisive = 1 if primary.severity is Severity.ERROR else 0
    score = len(_source_kinds(primary)) + min(corroborating, 1) + decisive - gaps
    score += extent_term(primary.extent)
    if score >= 2:
        return Confidence.HIGH
    return Confidence.MEDIUM if score == 1 else Confidence.LOW


def _ruled_out(
    ruled_out: Sequence[RuledOut], classes: Sequence[IncidentClass]
) -> tuple[RuledOut, ...]:
    """One reason per class not in the verdict (the first a rule gave)."""
    seen: dict[IncidentClass, RuledOut] = {}
    for r in ruled_out:
        if r.incident_class not in classes and r.incident_class not in seen:
            seen[r.incident_class] = r
    return tuple(sorted(seen.values(), key=lambda r: _rank(r.incident_class)))


def _insufficient(
    findings: Sequence[Finding],
    facts: Mapping[str, Fact | tuple[Fact, ...]],
    missing: Sequence[MissingEvidence],
    ruled_out: Sequence[RuledOut],
) -> Verdict:
    waited = _value(facts, "max_requests_waiting")
    # An error that stops any KV judgement (the engine never started) says more than a
    # list of missing files.
    blocking = [f for f in findings if f.implies is None and f.severity is Severity.ERROR]
    # What a rule saw but could not claim (no cap in evidence, bounds that straddle the
    # line); the most fundamental says why the verdict is open.
    undecided = sorted(
        (f for f in findings if not f.claimed and f.implies not in _NOT_A_PROBLEM),
        key=lambda f: _rank(f.implies),
    )
    if blocking:
        summary = f"No KV verdict: {blocking[0].title}."
    elif undecided:
        first = undecided[0]
        claim = first.implies.value if first.implies is not None else "a class"
        summary = f"{first.title}; not enough to claim {claim}"
    elif waited:
        summary = (
            f"Requests waited (up to {waited:.0f}) but no rule explains why; kvdiag will not "
            "call a queue healthy."
        )
    elif _value(facts, "peak_kv_usage") is not None:
        # The headroom rule's own reason when it gave one (a growth range that straddles
        # the pool), else what it lacked.
        why = next(
            (r.reason for r in ruled_out if r.incident_class is IncidentClass.HEALTHY),
            "no request lengths or pool size to bound the growth",
        )
        summary = (
            f"No problem was found, but the headroom could not be shown either: {why}. "
            "kvdiag will not guess healthy."
        )
    else:
        what = ", ".join(m.what for m in missing) or "no load or capacity signal in the inputs"
        summary = f"The inputs do not hold what a verdict needs ({what})."
    cls = IncidentClass.INSUFFICIENT_EVIDENCE
    return Verdict(cls, (cls,), Confidence.LOW, summary, _ruled_out(ruled_out, (cls,)))


def _doubted(
    level: Confidence, summary: str, primary: Finding, doubts: Sequence[Doubt]
) -> tuple[Confidence, str]:
    """One step lower, and said, when a doubt touches what the verdict stands on."""
    reasons = list(dict.fromkeys(d.reason for d in doubts if d.touches(primary)))
    if not reasons:
        return level, summary
    lowered = _LOWER.get(level, level)
    return (
        lowered,
        f"{summary}. Confidence {lowered.value}: {'; '.join(reasons)} (see input problems)",
    )


def classify(
    findings: Sequence[Finding],
    facts: Mapping[str, Fact | tuple[Fact, ...]],
    missing: Sequence[MissingEvidence],
    ruled_out: Sequence[RuledOut] = (),
    doubts: Sequence[Doubt] = (),
) -> Verdict:
    """The verdict for a set of findings; doubts about the inputs lower its confidence."""
    problems = [f for f in findings if f.claimed and f.implies not in _NOT_A_PROBLEM]
    candidates = [f for f in problems if f.severity.rank >= Severity.WARNING.rank]
    if candidates:
        primary = min(candidates, key=lambda f: (_rank(f.implies), -f.severity.rank))
        assert primary.implies is not None
        others = sorted({f.implies for f in problems if f.implies is not None}, key=_rank)
        classes = (primary.implies, *(c for c in others if c != primary.implies))
        where = f" (replica {primary.replica})" if primary.replica else ""
        summary = f"{primary.implies.value}{where}: {primary.title}"
        if len(classes) > 1:
            summary += f". Contributing: {', '.join(c.value for c in classes[1:])}"
            caused = [c.value for c in classes[1:] if c in {f.implies for f in candidates}]
            if caused:
                summary += (
                    f"; {primary.implies.value} ranks first as the cause of "
                    f"{', '.join(caused)} (causes before the symptoms they produce)"
                )
        level, summary = _doubted(confidence(primary, findings, missing), summary, primary, doubts)
        return Verdict(primary.implies, classes, level, summary, _ruled_out(ruled_out, classes))
    healthy = [f for f in findings if f.implies is IncidentClass.HEALTHY]
    if healthy:
        cls = IncidentClass.HEALTHY
        level, summary = _doubted(
            confidence(healthy[0], findings, missing), healthy[0].title, healthy[0], doubts
        )
        return Verdict(cls, (cls,), level, summary, _ruled_out(ruled_out, (cls,)))
    return _insufficient(findings, facts, missing, ruled_out)
