"""The verdict: precedence, contributing classes, confidence, ruled out, never a guess."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvdiag.analyzer import model as facts
from kvdiag.analyzer.model.incident import Incident
from kvdiag.domain.records.diagnosis import (
    Confidence,
    Evidence,
    Fact,
    Finding,
    IncidentClass,
    MissingEvidence,
    RuledOut,
    Severity,
)
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.rules.engine import classify, missing, reconcile, rule_runner
from tests.rules.casefile import build_store, load_cases

C = IncidentClass


def _finding(cls: IncidentClass, severity: Severity, *paths: str, layer: int = 3) -> Finding:
    ev = tuple(Evidence(p, 1, None, "x", 1, "line") for p in paths or ("server.log",))
    return Finding("KV999", "test.x", layer, severity, f"{cls.value} title", ev, implies=cls)


@pytest.mark.parametrize(
    ("findings", "primary", "classes"),
    [
        # A cause outranks the symptom it produces, whatever their severities.
        (
            [_finding(C.SATURATION, Severity.ERROR), _finding(C.SHRUNKEN_POOL, Severity.WARNING)],
            C.SHRUNKEN_POOL,
            (C.SHRUNKEN_POOL, C.SATURATION),
        ),
        (
            [
                _finding(C.ADMISSION_LIMITED, Severity.WARNING),
                _finding(C.PREFILL_PEAK, Severity.WARNING),
            ],
            C.PREFILL_PEAK,
            (C.PREFILL_PEAK, C.ADMISSION_LIMITED),
        ),
        # Info findings contribute but are never primary (the explicitly sized pool of b).
        (
            [_finding(C.SHRUNKEN_POOL, Severity.INFO), _finding(C.SATURATION, Severity.ERROR)],
            C.SATURATION,
            (C.SATURATION, C.SHRUNKEN_POOL),
        ),
        # healthy is a finding of its own and never a contributing class of a problem.
        (
            [_finding(C.HEALTHY, Severity.INFO), _finding(C.PADDING_WASTE, Severity.WARNING)],
            C.PADDING_WASTE,
            (C.PADDING_WASTE,),
        ),
        ([_finding(C.HEALTHY, Severity.INFO)], C.HEALTHY, (C.HEALTHY,)),
    ],
)
def test_precedence_and_contributing_classes(
    findings: list[Finding], primary: IncidentClass, classes: tuple[IncidentClass, ...]
) -> None:
    verdict = classify.classify(findings, {}, [])
    assert verdict.primary is primary
    assert verdict.classes == classes


def test_no_healthy_finding_is_insufficient_evidence_not_a_guess() -> None:
    quiet = classify.classify([], {"peak_kv_usage": Fact(0.93, "ratio", None)}, [])
    assert quiet.primary is C.INSUFFICIENT_EVIDENCE
    assert "will not guess" in quiet.summary
    queued = classify.classify([], {"max_requests_waiting": Fact(63, "requests", None)}, [])
    assert queued.primary is C.INSUFFICIENT_EVIDENCE and "63" in queued.summary
    empty = classify.classify([], {}, [MissingEvidence("no server log", "x")])
    assert "no server log" in empty.summary


def test_confidence_rises_with_sources_and_falls_with_missing_inputs() -> None:
    two = _finding(C.SATURATION, Severity.ERROR, "server.log", "metrics/1.prom")
    one = _finding(C.SATURATION, Severity.WARNING, "server.log")
    assert classify.classify([two], {}, []).confidence is Confidence.HIGH
    assert classify.classify([one], {}, []).confidence is Confidence.MEDIUM
    layer3_gap = MissingEvidence("no /metrics scrapes", "usage between stats lines")
    assert classify.classify([one], {}, [layer3_gap]).confidence is Confidence.LOW
    # A gap in another layer does not weaken a layer-3 verdict.
    layer1_gap = MissingEvidence("no nvidia-smi or dcgm snapshot", "layer 1")
    assert classify.classify([one], {}, [layer1_gap]).confidence is Confidence.MEDIUM


def test_ruled_out_keeps_one_reason_per_class_outside_the_verdict() -> None:
    reasons = [
        RuledOut(C.SATURATION, "waiting 63 with usage 31 %: not KV-bound"),
        RuledOut(C.SATURATION, "a second reason"),
        RuledOut(C.ADMISSION_LIMITED, "should not show: it is in the verdict"),
    ]
    verdict = classify.classify([_finding(C.ADMISSION_LIMITED, Severity.WARNING)], {}, [], reasons)
    assert [(r.incident_class, r.reason) for r in verdict.ruled_out] == [
        (C.SATURATION, "waiting 63 with usage 31 %: not KV-bound")
    ]


# Whole verdicts (every rule, the classifier, the reconciliation) on the rows the pending
# fixtures' ingesters will produce: the rule cases that mirror those fixtures.
VERDICTS = {
    "KV102-case-study-a100-activation-peak": C.SHRUNKEN_POOL,
    "KV104-tp2-72-vs-41": C.GPU_IMBALANCE,
    "KV103-oom-while-pool-not-full": C.MEMORY_OVERCOMMIT,
    "KV101-v1-refusal-with-estimate": C.UNSERVABLE_CONFIG,
    "KV301-full-pool-with-queue-and-preemptions": C.SATURATION,
    "KV303-one-replica-at-90-the-other-at-50": C.REPLICA_IMBALANCE,
}
CASES = {c.id: c for c in load_cases()}


@pytest.mark.parametrize("case_id", sorted(VERDICTS))
def test_whole_verdict_on_case_rows(case_id: str) -> None:
    store = build_store(CASES[case_id])
    try:
        reader = store.reader
        established = facts.establish(reader)
        absent = missing.missing_evidence(reader)
        result = rule_runner.run_rules(
            Incident(reader, established), AnalyzeOptions(incident=Path("."))
        )
        verdict = classify.classify(result.findings, established, absent, result.ruled_out)
        layers = reconcile.layers(result, absent)
    finally:
        store.discard()
    assert not result.problems
    assert verdict.primary is VERDICTS[case_id], verdict
    primary_layer = next(f.layer for f in result.findings if f.implies is verdict.primary)
    assert layers[primary_layer - 1].status == "problem"
    assert any(ch.isdigit() for ch in verdict.summary)


def test_an_open_verdict_says_what_a_rule_saw_but_could_not_claim() -> None:
    """Info findings of a class never become primary, but the summary leads with the most
    fundamental of them instead of saying that nothing was found."""
    findings = [
        replace(_finding(C.ADMISSION_LIMITED, Severity.INFO), claimed=False),
        replace(_finding(C.PADDING_WASTE, Severity.INFO), claimed=False),
    ]
    verdict = classify.classify(findings, {}, [])
    assert verdict.primary is C.INSUFFICIENT_EVIDENCE
    assert verdict.summary == "padding_waste title; not enough to claim padding_waste"
    # Beside a claimed class, an unclaimed one does not contribute.
    with_primary = classify.classify([*findings, _finding(C.SATURATION, Severity.ERROR)], {}, [])
    assert with_primary.classes == (C.SATURATION,)
