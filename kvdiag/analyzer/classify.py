"""From findings and facts to a verdict: primary class, contributing classes, confidence.

A pure function with a declared precedence: causes outrank the symptoms they produce
(a shrunken pool or a prefill peak explains saturation, not the other way round).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvdiag.analyzer.model import (
    Confidence,
    Fact,
    Finding,
    IncidentClass,
    MissingEvidence,
    RuledOut,
    Severity,
    Verdict,
)

# Earlier = more fundamental. Ties between findings of equal severity go to the earlier class.
PRECEDENCE: tuple[IncidentClass, ...] = (
    IncidentClass.UNSERVABLE_CONFIG,
    IncidentClass.MEMORY_OVERCOMMIT,
    IncidentClass.SHRUNKEN_POOL,
    IncidentClass.GPU_IMBALANCE,
    IncidentClass.REPLICA_IMBALANCE,
    IncidentClass.PREFILL_PEAK,
    IncidentClass.PADDING_WASTE,
    IncidentClass.SATURATION,
    IncidentClass.ADMISSION_LIMITED,
)
# Facts without which no load verdict (healthy or not) can be given.
LOAD_FACTS = ("peak_kv_usage", "max_requests_waiting")


def _value(facts: Mapping[str, Fact | tuple[Fact, ...]], name: str) -> float | None:
    fact = facts.get(name)
    if isinstance(fact, Fact) and isinstance(fact.value, int | float):
        return float(fact.value)
    if isinstance(fact, tuple):
        values = [float(f.value) for f in fact if isinstance(f.value, int | float)]
        return max(values) if values else None
    return None


def _confidence(
    primary: Finding, findings: Sequence[Finding], missing: Sequence[MissingEvidence]
) -> Confidence:
    """High when independent files corroborate, lower with fewer sources or missing inputs."""
    sources = {e.path.rsplit("/", 1)[0] if "/" in e.path else e.path for e in primary.evidence}
    corroborating = sum(1 for f in findings if f.implies == primary.implies and f is not primary)
    score = len(sources) + corroborating
    if len(missing) >= 3:
        score -= 1
    if score >= 2:
        return Confidence.HIGH
    return Confidence.MEDIUM if score == 1 else Confidence.LOW


def _healthy(
    facts: Mapping[str, Fact | tuple[Fact, ...]], missing: Sequence[MissingEvidence]
) -> Verdict:
    usage = _value(facts, "peak_kv_usage") or 0.0
    shown = f"{usage:.1%}" if usage < 0.1 else f"{usage:.0%}"
    summary = (
        f"KV usage peaked at {shown}, no request waited and none was preempted: the level is safe"
    )
    ruled = (
        RuledOut(IncidentClass.SATURATION, f"no queue and no preemption (peak usage {shown})"),
    )
    confidence = Confidence.HIGH if len(missing) <= 1 else Confidence.MEDIUM
    return Verdict(IncidentClass.HEALTHY, (IncidentClass.HEALTHY,), confidence, summary, ruled)


def classify(
    findings: Sequence[Finding],
    facts: Mapping[str, Fact | tuple[Fact, ...]],
    missing: Sequence[MissingEvidence],
) -> Verdict:
    """The verdict for a set of findings."""
    candidates = [
        f for f in findings if f.implies is not None and f.severity.rank >= Severity.WARNING.rank
    ]
    if candidates:
        candidates.sort(
            key=lambda f: (
                -f.severity.rank,
                PRECEDENCE.index(f.implies) if f.implies in PRECEDENCE else 99,
            )
        )
        primary = candidates[0]
        assert primary.implies is not None
        classes = tuple(dict.fromkeys(f.implies for f in candidates if f.implies is not None))
        summary = f"{primary.implies.value}: {primary.title}"
        return Verdict(primary.implies, classes, _confidence(primary, findings, missing), summary)
    if all(_value(facts, name) is not None for name in LOAD_FACTS):
        if not _value(facts, "max_requests_waiting") and not _value(facts, "preemptions"):
            return _healthy(facts, missing)
        return Verdict(
            IncidentClass.INSUFFICIENT_EVIDENCE,
            (IncidentClass.INSUFFICIENT_EVIDENCE,),
            Confidence.LOW,
            f"Requests waited (up to {_value(facts, 'max_requests_waiting'):.0f}) but no rule "
            "explains why; kvdiag will not call a queue healthy.",
        )
    what = ", ".join(m.what for m in missing) or "no load or capacity signal in the inputs"
    return Verdict(
        IncidentClass.INSUFFICIENT_EVIDENCE,
        (IncidentClass.INSUFFICIENT_EVIDENCE,),
        Confidence.LOW,
        f"The folder does not hold what a verdict needs ({what}).",
    )
