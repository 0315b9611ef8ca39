"""The rule contract: small classes that read the incident model and return findings.

A rule declares its code, name, layer, severity, the class it implies, the tables it
needs and its thresholds (with documented defaults, overridable from the CLI). The engine
skips a rule whose tables are empty, with the reason, and turns a rule that raises into a
listed engine problem instead of a crash.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kvdiag.analyzer.model.incident import Incident
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Evidence,
    Fact,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Scalar,
    Severity,
    SourceRef,
)

MAX_EVIDENCE = 8
_CODE = re.compile(r"^KV[0-9]\d{2}$")
_NAME = re.compile(r"^[a-z]+\.[a-z_]+$")


@dataclass(frozen=True, slots=True)
class Threshold:
    """A tunable number a rule compares against, with its default and meaning."""

    name: str
    default: float
    unit: str
    doc: str


class RuleContext(Incident):
    """What a rule may see: the incident (its facts and quantities), the rule's thresholds,
    and the means to state a finding, a reconciliation row or a ruled-out class."""

    def __init__(self, rule: Rule, incident: Incident, thresholds: Mapping[str, float]) -> None:
        super().__init__(incident._shares(), incident.facts)
        self._rule = rule
        self._thresholds = thresholds

    def threshold(self, name: str) -> float:
        return self._thresholds[name]

    def finding(
        self,
        title: str,
        evidence: Iterable[Evidence],
        remediation: Iterable[Remedy] = (),
        *,
        severity: Severity | None = None,
        replica: str | None = None,
        claimed: bool = True,
    ) -> Finding:
        """A finding stamped with this rule's code, name, layer and implied class;
        `claimed=False` when the evidence does not reach the class's line (Finding)."""
        unique = list(dict.fromkeys(evidence))
        return Finding(
            code=self._rule.code,
            name=self._rule.name,
            layer=self._rule.layer,
            severity=severity or self._rule.severity,
            title=title,
            evidence=tuple(unique[:MAX_EVIDENCE]),
            remediation=tuple(remediation),
            implies=self._rule.implies,
            evidence_total=len(unique),
            replica=replica,
            claimed=claimed,
        )

    def compare(
        self,
        quantity: str,
        expected: Scalar,
        observed: Scalar,
        unit: str | None,
        sources: Iterable[SourceRef | Evidence | Fact | None],
        note: str = "",
        *,
        threshold: bool = False,
        low: Scalar = None,
        high: Scalar = None,
    ) -> Comparison:
        """A reconciliation row: gap = observed - expected when both are numbers.

        `threshold`: `expected` is one of the rule's thresholds, not what a healthy system
        shows. `low`/`high`: the bounds of an estimated `observed`.
        """
        gap: Scalar = None
        if isinstance(expected, int | float) and isinstance(observed, int | float):
            gap = round(observed - expected, 4)
            if isinstance(gap, float) and gap.is_integer() and isinstance(expected, int):
                gap = int(gap)
        refs: list[SourceRef] = []
        for s in sources:
            ref = s.ref if isinstance(s, Evidence) else s.source if isinstance(s, Fact) else s
            if ref is not None and ref not in refs:
                refs.append(ref)
        kind = "threshold" if threshold else "healthy"
        return Comparison(
            quantity, expected, observed, gap, unit, tuple(refs), note, kind, low, high
        )

    def rule_out(self, reason: str) -> RuledOut:
        """Why the evidence argues against this rule's class."""
        assert self._rule.implies is not None
        return RuledOut(self._rule.implies, reason)


class Rule(ABC):
    """One check. Subclasses set the class attributes and implement `check`.

    The first docstring line is the rule's summary in `kvdiag rules`.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    layer: ClassVar[int | None]
    severity: ClassVar[Severity]
    implies: ClassVar[IncidentClass | None] = None
    requires: ClassVar[tuple[str, ...]] = ()  # tables that must all have rows
    requires_any: ClassVar[tuple[str, ...]] = ()  # at least one of these must have rows
    thresholds: ClassVar[tuple[Threshold, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not _CODE.match(cls.code):
            raise TypeError(f"{cls.__name__}: code {cls.code!r} must look like KV301")
        if not _NAME.match(cls.name):
            raise TypeError(f"{cls.__name__}: name {cls.name!r} must look like layer.snake_case")
        if not (cls.__doc__ or "").strip():
            raise TypeError(f"{cls.__name__}: a rule needs a docstring (its summary)")

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0]

    @classmethod
    def defaults(cls) -> dict[str, float]:
        return {t.name: t.default for t in cls.thresholds}

    @abstractmethod
    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        """Yield findings, reconciliation comparisons and ruled-out arguments."""
