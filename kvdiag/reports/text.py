"""The terminal summary: verdict, reconciliation, a compact findings table with evidence,
remedies, facts, inputs, what is missing."""

from __future__ import annotations

from collections.abc import Iterator

from kvdiag.domain.fmt import coverage, fmt_time, fmt_value, fmt_window
from kvdiag.domain.records.diagnosis import Diagnosis, Finding, InputRecord, Severity
from kvdiag.domain.safe_text import one_line
from kvdiag.reports import view

_STYLE = {"bold": "1", "red": "31", "yellow": "33", "green": "32", "dim": "2", "cyan": "36"}
_SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_STATUS_STYLE = {"ok": "green", "problem": "red", "not_checked": "dim"}
EXCERPT_CHARS = 140
FLEET_ROWS = 20  # replicas listed in the terminal; the JSON, HTML and --db hold them all
TITLE_CHARS = 90


class Painter:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(_STYLE[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _findings_table(d: Diagnosis, paint: Painter) -> Iterator[str]:
    """One row per finding: severity, code, layer, evidence count, title."""
    yield f"  {'SEV':<8}{'CODE':<7}{'LAYER':<7}{'EVID':>5}  TITLE"
    for f in d.findings:
        sev = paint(f"{f.severity.value.upper():<8}", "bold", _SEVERITY_STYLE[f.severity])
        layer = str(f.layer) if f.layer else "-"
        count = max(f.evidence_total, len(f.evidence))
        replica = f" [{one_line(f.replica)}]" if f.replica else ""
        title = _clip(one_line(f.title), TITLE_CHARS)
        yield f"  {sev}{f.code:<7}{layer:<7}{count:>5}  {title}{replica}"


def _evidence(f: Finding, paint: Painter) -> Iterator[str]:
    total = f.evidence_total or len(f.evidence)
    more = f", showing {len(f.evidence)}" if total > len(f.evidence) else ""
    scope = view.finding_scope(f)
    yield f"  {paint(f.code, 'bold')} {f.name} evidence ({total}{more}):"
    if scope:
        yield f"    {one_line(scope)}"
    for e in f.evidence:
        where = paint(f"{one_line(e.path)}:{e.line}" if e.line else one_line(e.path), "bold")
        yield f"    {where}  {fmt_time(e.ts)}  {one_line(e.what)} = {one_line(fmt_value(e.value))}"
        if e.excerpt:
            yield f"      {paint(_clip(one_line(e.excerpt), EXCERPT_CHARS), 'dim')}"


def _reconciliation(d: Diagnosis, paint: Painter) -> Iterator[str]:
    for layer in view.reconciliation(d):
        status = paint(f"{layer.status_text:<12}", _STATUS_STYLE.get(layer.status, "dim"))
        yield f"  {layer.layer} {one_line(layer.title):<24}{status} {one_line(layer.conclusion)}"
        for c in layer.rows:
            yield (
                f"      {one_line(c.quantity)}: expected {one_line(c.expected)}, "
                f"observed {one_line(c.observed)}, gap {one_line(c.gap)}"
            )


def _fleet(d: Diagnosis, paint: Painter) -> Iterator[str]:
    yield paint("FLEET", "bold") + f"  {one_line(view.fleet_summary(d))}"
    yield (
        f"    {'REPLICA':<20} {'VERDICT':<22} {'SEV':<8}{'PEAK':>5} {'P95':>5} {'VS OTHERS':>10}"
        f" {'WAIT':>5} {view.preemption_word(d)[:7].upper():>8} {'REQS':>6}"
    )
    for r in view.fleet_rows(d, FLEET_ROWS):
        mark = paint("! ", "bold", "red") if r.hot else "  "
        yield (
            f"  {mark}{_clip(one_line(r.replica), 20):<20} {r.verdict:<22} {r.severity:<8}"
            f"{r.peak:>5} {r.p95:>5} {r.gap:>10} {r.waiting:>5} {r.preemptions:>8} {r.requests:>6}"
        )
    if len(d.fleet) > FLEET_ROWS:
        yield f"    … {len(d.fleet) - FLEET_ROWS} more replicas in the JSON and HTML reports"


def _fact_lines(d: Diagnosis) -> Iterator[str]:
    for f in view.fact_rows(d):
        scope = f"{one_line(f.scope)} " if f.scope else ""
        src = f.source or f.note
        note = f" ({one_line(f.note)})" if f.note and f.source else ""
        yield f"  {f.name:<26} {one_line(f.value):<22} {scope}{one_line(src)}{note}"


def _input_line(r: InputRecord) -> str:
    if r.lines_total:
        counts = (
            f"{r.lines_total:,} lines, {r.lines_parsed:,} parsed "
            f"({coverage(r.lines_parsed, r.lines_total)}), {r.lines_unmatched:,} unmatched"
        )
        if r.lines_undecodable:
            counts += f", {r.lines_undecodable:,} undecodable"
    else:
        counts = ""
    why = f" — {one_line(r.reason)}" if r.reason else ""
    return f"  {r.status:<12} {one_line(r.path):<34} {r.kind:<12} {counts}{why}"


def _verdict(d: Diagnosis, paint: Painter) -> list[str]:
    v = d.verdict
    tone = {"ok": "green", "bad": "red"}.get(view.verdict_tone(d), "yellow")
    lines = [
        paint(f"kvdiag {d.kvdiag_version} — incident {one_line(d.incident)}", "bold"),
        "",
        f"VERDICT  {paint(v.primary.value, 'bold', tone)}"
        f"  (confidence {v.confidence.value}; classes: {', '.join(c.value for c in v.classes)})",
        f"  {one_line(v.summary)}",
        f"  window: {fmt_window(d.window, bool(d.series))}",
    ]
    lines += [f"  ruled out {r.incident_class.value}: {one_line(r.reason)}" for r in v.ruled_out]
    return lines


def render_text(diagnosis: Diagnosis, *, color: bool = False) -> str:
    """The terminal report."""
    d, paint = diagnosis, Painter(color)
    lines = _verdict(d, paint)
    lines += ["", paint("RECONCILIATION", "bold"), *_reconciliation(d, paint)]
    if d.fleet:
        lines += ["", *_fleet(d, paint)]
    lines += ["", paint("FINDINGS", "bold")]
    if d.findings:
        lines += list(_findings_table(d, paint))
        for f in d.findings:
            lines += ["", *_evidence(f, paint)] if f.evidence else []
    else:
        lines.append("  none")
    remedies = view.remedies(d)
    if remedies:
        lines += ["", paint("REMEDIES", "bold")]
        lines += [
            f"  {i}. {paint(one_line(r.action), 'bold')} — {one_line(r.rationale)} "
            f"({', '.join(r.codes)})"
            for i, r in enumerate(remedies, 1)
        ]
    lines += ["", paint("FACTS", "bold"), *(list(_fact_lines(d)) or ["  none"])]
    lines += ["", paint("INPUTS", "bold"), *(_input_line(r) for r in d.inputs)]
    for p in d.input_problems:
        where = f"{one_line(p.path)}:{p.line}" if p.line else one_line(p.path)
        lines.append(f"  problem      {where}: {one_line(p.message)}")
    if d.missing_evidence:
        lines += ["", paint("MISSING EVIDENCE", "bold")]
        lines += [f"  - {one_line(m.what)}: {one_line(m.would_decide)}" for m in d.missing_evidence]
    not_run = view.rules_not_run(d)
    lines += [
        "",
        paint("RULES", "bold") + f"  {len(d.rules) - len(not_run)} ran, {len(not_run)} did not",
    ]
    lines += [f"  {r.status:<8} {r.code} {r.name}: {one_line(r.reason)}" for r in not_run]
    lines += [f"  engine problem: {one_line(p)}" for p in d.engine_problems]
    return "\n".join(lines) + "\n"
