"""What the HTML and Markdown reports show, derived from the Diagnosis alone.

Values are formatted here (units, thousands separators) but not escaped: each renderer
escapes for its own syntax.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdiag.domain.fmt import coverage, fmt_duration, fmt_quantity, humanise
from kvdiag.domain.records.diagnosis import (
    CHARTED_BY,
    Comparison,
    Diagnosis,
    Fact,
    Finding,
    IncidentClass,
    InputRecord,
    LayerResult,
    RuleRun,
)

LAYER_TITLES = {1: "Pool vs card", 2: "Payload vs percentage", 3: "Peak demand vs pool"}
HOT_NAMED = 10  # hot replicas named in the fleet sentence; the table lists them all
STATUS_WORDS = {"ok": "ok", "problem": "problem", "not_checked": "not checked"}

_CLASS_HEADLINES = {
    IncidentClass.HEALTHY: "Healthy",
    IncidentClass.INSUFFICIENT_EVIDENCE: "Insufficient evidence",
}


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    quantity: str
    expected: str
    observed: str
    gap: str
    sources: tuple[str, ...]
    note: str


@dataclass(frozen=True, slots=True)
class LayerView:
    layer: int
    title: str
    status: str  # ok | problem | not_checked
    status_text: str
    conclusion: str
    rows: tuple[ComparisonRow, ...]


@dataclass(frozen=True, slots=True)
class RemedyView:
    action: str
    rationale: str
    codes: tuple[str, ...]  # findings that propose it


def headline(cls: IncidentClass) -> str:
    """The verdict as a title: 'Saturation', 'Shrunken pool'."""
    return _CLASS_HEADLINES.get(cls, humanise(cls.value).capitalize())


def engines(d: Diagnosis) -> str:
    """The engine(s) the incident ran, from the `engine` fact ("sglang", "sglang, vllm")."""
    fact = d.facts.get("engine")
    found = fact if isinstance(fact, tuple) else (fact,) if fact is not None else ()
    return ", ".join(str(f.value) for f in found) or "unknown"


def preemption_word(d: Diagnosis) -> str:
    """What the engine calls a request evicted to free KV blocks: SGLang retracts, vLLM preempts."""
    return "retractions" if engines(d) == "sglang" else "preemptions"


def verdict_tone(d: Diagnosis) -> str:
    """ok | unknown | bad: the banner's colour."""
    if d.verdict.primary is IncidentClass.HEALTHY:
        return "ok"
    if d.verdict.primary is IncidentClass.INSUFFICIENT_EVIDENCE:
        return "unknown"
    return "bad"


def _comparison(c: Comparison) -> ComparisonRow:
    expected = fmt_quantity(c.expected, c.unit)
    if c.expected_kind == "threshold" and c.expected is not None:
        expected = f"threshold {expected}"  # a rule's line, not what a healthy system shows
    return ComparisonRow(
        quantity=humanise(c.quantity),
        expected=expected,
        observed=_observed(c),
        gap=fmt_quantity(c.gap, c.unit),
        sources=tuple(str(s) for s in c.sources),
        note=c.note,
    )


def _observed(c: Comparison) -> str:
    """The observed value, or the range the evidence leaves open when it is an estimate."""
    if c.low is None and c.high is None:
        return fmt_quantity(c.observed, c.unit)
    low, high = fmt_quantity(c.low, c.unit), fmt_quantity(c.high, c.unit)
    if c.high is None:
        return f"at least {low}"
    if c.low is None:
        return f"at most {high}"
    return low if low == high else f"{low} to {high}"


def _layer(result: LayerResult) -> LayerView:
    return LayerView(
        layer=result.layer,
        title=result.title or LAYER_TITLES.get(result.layer, f"Layer {result.layer}"),
        status=result.status,
        status_text=STATUS_WORDS.get(result.status, humanise(result.status)),
        conclusion=result.conclusion,
        rows=tuple(_comparison(c) for c in result.comparisons),
    )


def reconciliation(d: Diagnosis) -> tuple[LayerView, ...]:
    """The three layers in order; a layer the analysis did not reach says 'not checked'."""
    done = {r.layer: _layer(r) for r in d.reconciliation}
    for layer, title in LAYER_TITLES.items():
        done.setdefault(
            layer,
            LayerView(
                layer, title, "not_checked", "not checked", "not checked by this analysis", ()
            ),
        )
    return tuple(done[k] for k in sorted(done))


def remedies(d: Diagnosis) -> tuple[RemedyView, ...]:
    """Every finding's remedies, most severe finding first, each action once."""
    seen: dict[str, RemedyView] = {}
    for f in d.findings:
        for r in f.remediation:
            prior = seen.get(r.action)
            seen[r.action] = (
                RemedyView(r.action, r.rationale, (f.code,))
                if prior is None
                else RemedyView(prior.action, prior.rationale, (*prior.codes, f.code))
            )
    return tuple(seen.values())


def finding_scope(f: Finding) -> str:
    """How much of the incident the finding stands on, and whether it claims its class:
    what the verdict's confidence weighed besides the sources (classify.extent_term)."""
    parts = []
    if (extent := f.extent) is not None:
        seen = "seen once" if extent.observations <= 1 else f"seen {extent.observations:,} times"
        if extent.observations > 1 and extent.seconds is not None:
            seen += f" over {fmt_duration(extent.seconds)}"
        elif extent.observations > 1:
            seen += " (no times to span them)"
        parts.append(seen)
    if not f.claimed and f.implies is not None:
        claim = humanise(f.implies.value)
        parts.append(f"{claim} not claimed: the evidence does not reach its line")
    return "; ".join(parts)


def input_coverage(r: InputRecord) -> str:
    return coverage(r.lines_parsed, r.lines_total)


def rules_not_run(d: Diagnosis) -> tuple[RuleRun, ...]:
    return tuple(r for r in d.rules if r.status != "ran")


def top_findings(d: Diagnosis, limit: int) -> tuple[Finding, ...]:
    """Findings by severity (stable within a severity), the first `limit`."""
    ranked = sorted(d.findings, key=lambda f: -f.severity.rank)
    return tuple(ranked[:limit])


@dataclass(frozen=True, slots=True)
class FactRow:
    name: str
    value: str
    scope: str
    source: str
    note: str


def fact_rows(d: Diagnosis) -> tuple[FactRow, ...]:
    rows = []
    for name, fact in sorted(d.facts.items()):
        for f in fact if isinstance(fact, tuple) else (fact,):
            assert isinstance(f, Fact)
            rows.append(
                FactRow(
                    name=name,
                    value=fmt_quantity(f.value, f.unit),
                    scope=" ".join(f"{k}={v}" for k, v in f.scope),
                    source=str(f.source) if f.source else "",
                    note=f.note or "",
                )
            )
    return tuple(rows)


@dataclass(frozen=True, slots=True)
class FleetRowView:
    replica: str
    verdict: str
    severity: str
    codes: str
    peak: str
    p95: str
    gap: str
    waiting: str
    preemptions: str
    requests: str
    hot: bool
    summary: str


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value * 100:+.0f} pts" if signed else f"{value * 100:.0f}%"


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def fleet_rows(d: Diagnosis, limit: int | None = None) -> tuple[FleetRowView, ...]:
    """The fleet table, worst replicas first (as the record orders them)."""
    return tuple(
        FleetRowView(
            replica=r.replica,
            verdict=humanise(r.primary.value),
            severity=r.severity.value if r.severity else "—",
            codes=", ".join(r.codes) or "—",
            peak=_pct(r.peak_kv_usage),
            p95=_pct(r.p95_kv_usage),
            gap=_pct(r.usage_gap, signed=True),
            waiting=_count(r.max_waiting),
            preemptions=_count(r.preemptions),
            requests=_count(r.requests),
            hot=r.hot,
            summary=r.summary,
        )
        for r in d.fleet[:limit]
    )


def charted_note(d: Diagnosis) -> str:
    """Which replicas the charts show, when a fleet has more than they draw."""
    charted = {s.replica for s in d.series}
    if not charted or len(d.fleet) <= len(charted):
        return ""
    return (
        f"The charts show the {len(charted)} busiest of the {len(d.fleet)} replicas "
        f"({CHARTED_BY}); the fleet table lists every replica."
    )


def fleet_summary(d: Diagnosis) -> str:
    """One sentence: how many replicas, which classes, which stand out, the usage spread."""
    rows = d.fleet
    classes: dict[str, int] = {}
    for r in rows:
        classes[humanise(r.primary.value)] = classes.get(humanise(r.primary.value), 0) + 1
    counted = ", ".join(f"{n} {name}" for name, n in sorted(classes.items(), key=lambda kv: -kv[1]))
    p95 = sorted(r.p95_kv_usage for r in rows if r.p95_kv_usage is not None)
    spread = f"; p95 KV usage {_pct(p95[0])} to {_pct(p95[-1])}" if p95 else ""
    hot = [r.replica for r in rows if r.hot]
    named = ", ".join(hot[:HOT_NAMED]) + (
        f" and {len(hot) - HOT_NAMED} more" if len(hot) > HOT_NAMED else ""
    )
    stand_out = f"; far from the others: {named}" if hot else "; none far from the others"
    return f"{len(rows)} replicas: {counted}{spread}{stand_out}"
