"""The terminal summary: verdict, findings with evidence, facts, inputs, what is missing."""

from __future__ import annotations

from collections.abc import Iterator

from kvdiag.analyzer.model import Diagnosis, Fact, Finding, InputRecord, Severity
from kvdiag.reports.safe import plain

_STYLE = {"bold": "1", "red": "31", "yellow": "33", "green": "32", "dim": "2", "cyan": "36"}
_SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


class _Painter:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(_STYLE[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"


def fmt_value(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return plain(value)


def _finding(f: Finding, paint: _Painter) -> Iterator[str]:
    layer = f" [layer {f.layer}]" if f.layer else ""
    replica = f" (replica {plain(f.replica)})" if f.replica else ""
    sev = paint(f.severity.value.upper(), "bold", _SEVERITY_STYLE[f.severity])
    yield f"  {sev} {f.code} {f.name}{layer}{replica}"
    yield f"    {plain(f.title)}"
    if f.evidence:
        more = (
            f" (showing {len(f.evidence)} of {f.evidence_total})"
            if f.evidence_total > len(f.evidence)
            else ""
        )
        yield f"    evidence{more}:"
        for e in f.evidence:
            where = f"{plain(e.path)}:{e.line}" if e.line else plain(e.path)
            value = fmt_value(e.value)
            yield f"      {paint(where, 'bold')}  {e.ts or '-'}  {plain(e.what)} = {value}"
            if e.excerpt:
                yield f"        {paint(plain(e.excerpt), 'dim')}"
    if f.remediation:
        yield "    remedies:"
        for r in f.remediation:
            yield f"      - {plain(r.action)}: {plain(r.rationale)}"


def _fact_lines(diagnosis: Diagnosis) -> Iterator[str]:
    for name, fact in sorted(diagnosis.facts.items()):
        for f in fact if isinstance(fact, tuple) else (fact,):
            assert isinstance(f, Fact)
            scope = " ".join(f"{k}={plain(v)}" for k, v in f.scope)
            unit = f" {f.unit}" if f.unit else ""
            src = str(f.source) if f.source else (f.note or "")
            note = f" ({plain(f.note)})" if f.note and f.source else ""
            scoped = f"{scope} " if scope else ""
            yield f"  {name:<26} {fmt_value(f.value) + unit:<22} {scoped}{plain(src)}{note}"


def _input_line(r: InputRecord) -> str:
    if r.lines_total:
        share = f"{100 * r.lines_parsed / r.lines_total:.1f}%"
        counts = (
            f"{r.lines_total:,} lines, {r.lines_parsed:,} parsed ({share}), "
            f"{r.lines_unmatched:,} unmatched"
        )
        if r.lines_undecodable:
            counts += f", {r.lines_undecodable:,} undecodable"
    else:
        counts = ""
    why = f" — {plain(r.reason)}" if r.reason else ""
    return f"  {r.status:<12} {plain(r.path):<34} {r.kind:<12} {counts}{why}"


def render_text(diagnosis: Diagnosis, *, color: bool = False) -> str:
    """The terminal report."""
    paint = _Painter(color)
    v = diagnosis.verdict
    tone = "green" if v.primary.value == "healthy" else "red"
    lines = [
        paint(f"kvdiag {diagnosis.kvdiag_version} — incident {plain(diagnosis.incident)}", "bold"),
        "",
        f"VERDICT  {paint(v.primary.value, 'bold', tone)}"
        f"  (confidence {v.confidence.value}; classes: {', '.join(c.value for c in v.classes)})",
        f"  {plain(v.summary)}",
    ]
    lines += [f"  ruled out {r.incident_class.value}: {plain(r.reason)}" for r in v.ruled_out]
    lines += ["", paint("FINDINGS", "bold")]
    lines += [line for f in diagnosis.findings for line in _finding(f, paint)] or ["  none"]
    lines += ["", paint("FACTS", "bold"), *(list(_fact_lines(diagnosis)) or ["  none"])]
    lines += ["", paint("INPUTS", "bold"), *(_input_line(r) for r in diagnosis.inputs)]
    for p in diagnosis.input_problems:
        where = f"{plain(p.path)}:{p.line}" if p.line else plain(p.path)
        lines.append(f"  problem      {where}: {plain(p.message)}")
    if diagnosis.missing_evidence:
        lines += ["", paint("MISSING EVIDENCE", "bold")]
        lines += [
            f"  - {plain(m.what)}: {plain(m.would_decide)}" for m in diagnosis.missing_evidence
        ]
    ran = sum(1 for r in diagnosis.rules if r.status == "ran")
    lines += ["", paint("RULES", "bold") + f"  {ran} ran, {len(diagnosis.rules) - ran} did not"]
    lines += [
        f"  {r.status:<8} {r.code} {r.name}: {plain(r.reason)}"
        for r in diagnosis.rules
        if r.status != "ran"
    ]
    lines += [f"  engine problem: {plain(p)}" for p in diagnosis.engine_problems]
    return "\n".join(lines) + "\n"
