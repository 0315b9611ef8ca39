"""The three-layer reconciliation as a record: per layer, the numbers compared and what the
layer concluded (domain.md §3). Renderers show exactly this; nothing here decides a class.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvdiag.domain.records.diagnosis import (
    Comparison,
    Finding,
    IncidentClass,
    LayerResult,
    MissingEvidence,
    Severity,
)
from kvdiag.rules import RULES
from kvdiag.rules.engine.missing import affected_layers
from kvdiag.rules.engine.rule_runner import RulesOutcome

TITLES = {1: "Pool vs card", 2: "Payload vs percentage", 3: "Peak demand vs pool"}
_LAYER_OF = {r.code: r.layer for r in RULES}


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _problem(f: Finding) -> bool:
    return f.implies not in (None, IncidentClass.HEALTHY)


def _conclusion(
    layer: int,
    findings: Sequence[Finding],
    comps: Sequence[Comparison],
    result: RulesOutcome,
    missing: Sequence[MissingEvidence],
) -> tuple[str, str]:
    problems = sorted((f for f in findings if _problem(f)), key=lambda f: -f.severity.rank)
    if problems:
        return "problem", "; ".join(f"{f.code}: {f.title}" for f in problems[:3])
    info = [f for f in findings if f.severity is Severity.INFO]
    if info:
        return "ok", "; ".join(f"{f.code}: {f.title}" for f in info[:2])
    if comps:
        shown = ", ".join(
            f"{c.quantity} {_fmt(c.observed)}{' ' + c.unit if c.unit else ''}" for c in comps[:3]
        )
        return "ok", f"nothing out of line ({shown})"
    why = [
        f"{r.code} {r.status}: {r.reason}"
        for r in result.runs
        if _LAYER_OF.get(r.code) == layer and r.status != "ran"
    ]
    why += [m.what for m in missing if layer in affected_layers(m)]
    return "not_checked", "not checked: " + ("; ".join(why) or "no rule had numbers to compare")


def layers(result: RulesOutcome, missing: Sequence[MissingEvidence]) -> tuple[LayerResult, ...]:
    """One LayerResult per layer, comparisons de-duplicated by quantity."""
    out = []
    for layer, title in TITLES.items():
        comps: dict[str, Comparison] = {}
        for lay, comp in result.comparisons:
            if lay == layer:
                comps.setdefault(comp.quantity, comp)
        found = [f for f in result.findings if f.layer == layer]
        status, text = _conclusion(layer, found, list(comps.values()), result, missing)
        out.append(LayerResult(layer, title, status, text, tuple(comps.values())))
    return tuple(out)
