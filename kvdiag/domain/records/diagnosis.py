"""The diagnosis record and its parts.

Every output format (terminal, JSON, Markdown, HTML) is a view of one `Diagnosis`.
Records are frozen; `Diagnosis.to_dict()` is the canonical, JSON-ready form.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = "1.2"

Scalar = int | float | str | bool | None


class Severity(enum.StrEnum):
    """How much a finding matters; ordered info < warning < error."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 1, Severity.WARNING: 2, Severity.ERROR: 3}


class IncidentClass(enum.StrEnum):
    """The incident classes of domain.md §4, plus the two non-incident verdicts."""

    SHRUNKEN_POOL = "shrunken_pool"
    PADDING_WASTE = "padding_waste"
    PREFILL_PEAK = "prefill_peak"
    SATURATION = "saturation"
    ADMISSION_LIMITED = "admission_limited"
    GPU_IMBALANCE = "gpu_imbalance"
    REPLICA_IMBALANCE = "replica_imbalance"
    MEMORY_OVERCOMMIT = "memory_overcommit"
    UNSERVABLE_CONFIG = "unservable_config"
    HEALTHY = "healthy"
    INSUFFICIENT_EVIDENCE = "insufficient_evidence"


class Confidence(enum.StrEnum):
    """How strongly the evidence supports the verdict."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(frozen=True, slots=True, order=True)
class SourceRef:
    """A place in the incident folder: POSIX path relative to the folder, 1-based line."""

    path: str
    line: int | None = None

    def __str__(self) -> str:
        return self.path if self.line is None else f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Evidence:
    """One observation that supports a finding, with where it was read."""

    path: str
    line: int | None
    ts: str | None  # ISO-8601 (UTC, no zone suffix) when the source gives a time
    what: str  # canonical quantity, e.g. "kv_cache_usage", "num_requests_waiting"
    value: Scalar
    excerpt: str  # the raw source line, control characters removed, truncated

    @property
    def ref(self) -> SourceRef:
        return SourceRef(self.path, self.line)


@dataclass(frozen=True, slots=True)
class Remedy:
    """A concrete change, with what it buys in tokens, requests or bytes where known."""

    action: str  # e.g. "--max-num-seqs 4"
    rationale: str  # e.g. "keeps worst-case demand (4 x 2,048 tokens) under the pool of 8,704"


@dataclass(frozen=True, slots=True)
class Extent:
    """How much of the incident a finding's condition covered.

    `observations`: the distinct moments that show it (stats intervals, scrapes, engine
    events; an engine's own running count of its events counts each). `seconds`: from the
    first to the last of them; None when no span can be measured (the lines carry no time,
    or one line stands for all). The verdict's confidence weighs it (verdict/classify.py).
    """

    observations: int
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """What one rule concluded, with its evidence and remedies."""

    code: str
    name: str
    layer: int | None  # 1 pool vs card, 2 payload vs percentage, 3 peak vs pool
    severity: Severity
    title: str
    evidence: tuple[Evidence, ...]
    remediation: tuple[Remedy, ...] = ()
    implies: IncidentClass | None = None
    evidence_total: int = 0  # evidence rows available before capping
    replica: str | None = None
    extent: Extent | None = None  # None: the rule does not measure how long its condition held
    # False: the rule saw its class's signs but the evidence does not reach the line (bounds
    # that straddle it, no limit named); the class is then neither primary nor contributing.
    claimed: bool = True


@dataclass(frozen=True, slots=True)
class Fact:
    """A number kvdiag established, with where it came from.

    `note` says how it was derived when it was not read directly ("estimated from
    config.json", "vLLM default for 0.32").
    """

    value: Scalar
    unit: str | None
    source: SourceRef | None
    note: str | None = None
    scope: tuple[tuple[str, str], ...] = ()  # e.g. (("gpu", "0"),) or (("replica", "pod-7"),)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One row of a reconciliation layer: a quantity expected vs observed."""

    quantity: str
    expected: Scalar
    observed: Scalar
    gap: Scalar
    unit: str | None
    sources: tuple[SourceRef, ...]
    note: str = ""
    # "healthy": what a healthy system shows; "threshold": a rule's line, not a norm.
    expected_kind: str = "healthy"
    # Bounds of `observed` when it is an estimate the evidence leaves open (None: exact).
    low: Scalar = None
    high: Scalar = None


@dataclass(frozen=True, slots=True)
class LayerResult:
    """One of the three reconciliation layers and what it concluded."""

    layer: int
    title: str
    status: str  # "ok" | "problem" | "not_checked"
    conclusion: str
    comparisons: tuple[Comparison, ...] = ()


@dataclass(frozen=True, slots=True)
class UnmatchedTemplate:
    """A group of unmatched lines sharing a shape (digits and ids masked)."""

    template: str
    count: int
    first_line: int
    example: str


@dataclass(frozen=True, slots=True)
class InputRecord:
    """What happened to one file of the incident folder."""

    path: str
    kind: str  # ingester kind, or "unknown"
    status: str  # "used" | "skipped" | "unrecognised" | "refused"
    reason: str
    size_bytes: int
    lines_total: int = 0
    lines_parsed: int = 0
    lines_unmatched: int = 0
    lines_undecodable: int = 0
    records: int = 0  # events or samples extracted
    notes: tuple[
        str, ...
    ] = ()  # e.g. "year 2026 from scrape file names", "3 wrapped lines rejoined"
    unmatched_templates: tuple[UnmatchedTemplate, ...] = ()


@dataclass(frozen=True, slots=True)
class InputProblem:
    """Something wrong with an input that the analysis worked around."""

    path: str
    line: int | None
    message: str


@dataclass(frozen=True, slots=True)
class MissingEvidence:
    """A piece of evidence the folder lacks, and what it would have decided."""

    what: str
    would_decide: str


@dataclass(frozen=True, slots=True)
class RuleRun:
    """Whether a rule ran, was skipped (and why), or crashed."""

    code: str
    name: str
    status: str  # "ran" | "skipped" | "crashed"
    reason: str = ""
    findings: int = 0


@dataclass(frozen=True, slots=True)
class RuledOut:
    """A class the evidence argues against, and the argument."""

    incident_class: IncidentClass
    reason: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """The classification: a primary class, contributing classes, confidence, one sentence."""

    primary: IncidentClass
    classes: tuple[IncidentClass, ...]
    confidence: Confidence
    summary: str
    ruled_out: tuple[RuledOut, ...] = ()


@dataclass(frozen=True, slots=True)
class Series:
    """A time series the reports chart, already downsampled."""

    name: str
    unit: str
    replica: str
    points: tuple[tuple[str, float], ...]  # (ISO time, value)
    source: str  # e.g. "metrics", "server.log stats lines"


@dataclass(frozen=True, slots=True)
class ReplicaVerdict:
    """One replica of a fleet: its own verdict, its load, and how it compares with the fleet."""

    replica: str
    primary: IncidentClass  # from the findings scoped to this replica (KV303 aside)
    severity: Severity | None  # its worst finding, None without findings
    codes: tuple[str, ...]  # rule codes of its findings
    summary: str  # the title of its primary finding, or why there is no verdict
    peak_kv_usage: float | None  # ratio 0..1
    p95_kv_usage: float | None
    max_waiting: int | None
    preemptions: int | None  # increase over the window
    requests: int | None  # requests finished in the window (prompt-length histogram count)
    usage_gap: float | None  # p95 usage minus the other replicas' median p95 (ratio)
    hot: bool  # far fuller or far more queued than the fleet (KV303's thresholds)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The one record every renderer reads."""

    incident: str
    verdict: Verdict
    findings: tuple[Finding, ...]
    facts: Mapping[str, Fact | tuple[Fact, ...]]
    inputs: tuple[InputRecord, ...]
    input_problems: tuple[InputProblem, ...] = ()
    missing_evidence: tuple[MissingEvidence, ...] = ()
    rules: tuple[RuleRun, ...] = ()
    engine_problems: tuple[str, ...] = ()
    reconciliation: tuple[LayerResult, ...] = ()
    series: tuple[Series, ...] = ()
    window: tuple[str, str] | None = None  # incident window (ISO start, end)
    fleet: tuple[ReplicaVerdict, ...] = ()  # per replica, worst first (two or more replicas)
    kvdiag_version: str = ""
    schema_version: str = SCHEMA_VERSION

    @property
    def max_severity(self) -> Severity | None:
        ranked = sorted((f.severity for f in self.findings), key=lambda s: s.rank)
        return ranked[-1] if ranked else None

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON-ready form (keys stable; see schema/diagnosis.schema.json)."""
        out = _plain(self)
        assert isinstance(out, dict)
        out["facts"] = {k: _plain(v) for k, v in sorted(self.facts.items())}
        return out


_SCALARS = frozenset({str, int, bool, type(None)})


def _plain(value: Any) -> Any:
    """Turn records into JSON-ready dicts, lists and scalars (enums become their values)."""
    kind = type(value)  # exact types first: a fleet's chart points are most of the calls
    if kind in _SCALARS:
        return value
    if kind is float:
        return None if value != value else value  # NaN is not JSON
    if kind is tuple or kind is list:
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            _json_key(f.name): _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


def _json_key(name: str) -> str:
    # `class` is the natural JSON key but a Python keyword.
    return "class" if name == "incident_class" else name


def scope_dict(fact: Fact) -> dict[str, str]:
    """A fact's scope as a dict, for renderers."""
    return dict(fact.scope)


__all__ = [
    "SCHEMA_VERSION",
    "Comparison",
    "Confidence",
    "Diagnosis",
    "Evidence",
    "Extent",
    "Fact",
    "Finding",
    "IncidentClass",
    "InputProblem",
    "InputRecord",
    "LayerResult",
    "MissingEvidence",
    "Remedy",
    "ReplicaVerdict",
    "RuleRun",
    "RuledOut",
    "Series",
    "Severity",
    "SourceRef",
    "UnmatchedTemplate",
    "Verdict",
]


@dataclass(frozen=True, slots=True)
class Doubt:
    """A reason to trust some inputs less (validate.py, timeline.py finds them).

    It lowers the confidence of a verdict whose primary finding cites one of `paths` (a
    file, or a folder holding it); with no paths, of every verdict.
    """

    reason: str
    paths: frozenset[str] = frozenset()

    def touches(self, finding: Finding) -> bool:
        if not self.paths:
            return True
        return any(
            e.path == p or e.path.startswith(p.rstrip("/") + "/")
            for e in finding.evidence
            for p in self.paths
        )


# How a fleet's replicas are ranked for the charts (the busiest first); the reports say it.
CHARTED_BY = "most requests waiting, then highest KV cache usage, then most preemptions"
