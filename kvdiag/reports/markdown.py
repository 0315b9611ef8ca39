"""Markdown for tickets: GitHub / GitLab flavoured, tables and text only, no raw HTML.

Text from inputs is escaped so it cannot break a table, open a link, mention a user or
inject HTML: every Markdown punctuation character gets a backslash, line breaks become
spaces. Raw lines go in code spans sized to outrun any backticks they hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from kvdiag.domain.fmt import fmt_time, fmt_value, fmt_window, humanise
from kvdiag.domain.records.diagnosis import Diagnosis, Finding
from kvdiag.domain.safe_text import plain
from kvdiag.reports import view

TOP_FINDINGS = 5
FLEET_ROWS = 10  # worst replicas listed; the others are in the HTML and JSON
EVIDENCE_ROWS = 5
EXCERPT_CHARS = 160

# CommonMark lets a backslash escape any ASCII punctuation. Escaped: what means something
# inline in GFM (emphasis, code, links, HTML, tables, strikethrough, entities, math,
# mentions, issue refs), what autolinks (http://, www.), and block markers at the start.
_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~&@$])")
_AUTOLINK = re.compile(r"(?<=\w):(?=//)|(?<=\bwww)\.", re.IGNORECASE)
_LEADING = re.compile(r"^(\d+)([.)])|^([-+=])")
_BREAKS = re.compile(r"[\r\n\t\u2028\u2029]+")


def md_text(value: object) -> str:
    """Text safe anywhere in Markdown, including a table cell."""
    text = _SPECIAL.sub(r"\\\1", _BREAKS.sub(" ", plain(value)).strip())
    text = _AUTOLINK.sub(lambda m: "\\" + m.group(0), text)
    return _LEADING.sub(lambda m: (m.group(1) or "") + "\\" + (m.group(2) or m.group(3)), text)


def md_code(value: object, *, limit: int = EXCERPT_CHARS) -> str:
    """A code span that holds the text literally, safe in a table cell."""
    text = _BREAKS.sub(" ", plain(value)).strip()
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    if not text:
        return ""
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    # In a GFM table a pipe splits the cell even inside a code span, unless escaped.
    return f"{fence}{pad}{text.replace('|', chr(92) + '|')}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    """A GFM table; cells must already be escaped. `align` has one of l/r per column."""
    marks = [("---:" if a == "r" else "---") for a in align.ljust(len(header), "l")]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _verdict(d: Diagnosis) -> list[str]:
    v = d.verdict
    classes = ", ".join(humanise(c.value) for c in v.classes) or "none"
    lines = [
        f"## kvdiag: {md_text(view.headline(v.primary))} (confidence {v.confidence.value})",
        "",
        f"**{md_text(v.summary)}**",
        "",
        f"- Incident: {md_text(d.incident)}",
        f"- Engine: {md_text(view.engines(d))}",
        f"- Window: {md_text(fmt_window(d.window, bool(d.series)))}",
        f"- Classes: {md_text(classes)}",
    ]
    lines += [
        f"- Ruled out {md_text(humanise(r.incident_class.value))}: {md_text(r.reason)}"
        for r in v.ruled_out
    ]
    return [*lines, ""]


def _reconciliation(d: Diagnosis) -> list[str]:
    rows = []
    for layer in view.reconciliation(d):
        name = f"{layer.layer} {md_text(layer.title)} ({layer.status_text})"
        conclusion = md_text(layer.conclusion)
        for i, c in enumerate(layer.rows or (None,)):
            first = i == 0
            cells = [c.quantity, c.expected, c.observed, c.gap] if c else ["—"] * 4
            rows.append(
                [name if first else "", *(md_text(x) for x in cells), conclusion if first else ""]
            )
    header = ["Layer", "Quantity", "Expected", "Observed", "Gap", "Conclusion"]
    return ["### Reconciliation", "", *table(header, rows, "llrrrl")]


def _fleet(d: Diagnosis) -> list[str]:
    if not d.fleet:
        return []
    rows = [
        [
            md_text(("hot: " if r.hot else "") + r.replica),
            md_text(r.verdict),
            md_text(r.severity),
            md_text(r.peak),
            md_text(r.p95),
            md_text(r.gap),
            md_text(r.waiting),
            md_text(r.preemptions),
            md_text(r.requests),
        ]
        for r in view.fleet_rows(d, FLEET_ROWS)
    ]
    header = ["Replica", "Verdict", "Severity", "Peak KV", "p95 KV", "vs others", "Max waiting"]
    lines = ["### Fleet", "", md_text(view.fleet_summary(d)), ""]
    lines += table([*header, view.preemption_word(d).capitalize(), "Requests"], rows, "lllrrrrrr")
    if len(d.fleet) > FLEET_ROWS:
        lines += [f"_{len(d.fleet) - FLEET_ROWS} more replicas in the HTML or JSON report._", ""]
    return lines


def _finding(f: Finding) -> list[str]:
    where = f" (layer {f.layer})" if f.layer else ""
    replica = f", replica {md_text(f.replica)}" if f.replica else ""
    lines = [
        f"**{f.severity.value.upper()} {md_text(f.code)}** {md_text(f.name)}{where}{replica}: "
        f"{md_text(f.title)}",
        "",
    ]
    if scope := view.finding_scope(f):
        lines += [f"_{md_text(scope)}._", ""]
    if not f.evidence:
        return lines
    rows = [
        [
            md_code(f"{e.path}:{e.line}" if e.line else e.path),
            md_text(fmt_time(e.ts)),
            md_text(e.what),
            md_text(fmt_value(e.value)),
            md_code(e.excerpt),
        ]
        for e in f.evidence[:EVIDENCE_ROWS]
    ]
    lines += table(["Where", "Time (UTC)", "What", "Value", "Raw line"], rows, "lllrl")
    shown = min(len(f.evidence), EVIDENCE_ROWS)
    if f.evidence_total > shown:
        lines += [f"_{shown} of {f.evidence_total} evidence rows; the others are in the JSON._", ""]
    return lines


def _findings(d: Diagnosis) -> list[str]:
    top = view.top_findings(d, TOP_FINDINGS)
    lines = ["### Findings", ""]
    if not top:
        return [*lines, "No finding.", ""]
    for f in top:
        lines += _finding(f)
    if len(d.findings) > len(top):
        lines += [f"_{len(d.findings) - len(top)} more findings in the HTML or JSON report._", ""]
    return lines


def _remedies(d: Diagnosis) -> list[str]:
    items = view.remedies(d)
    lines = ["### Remedies", ""]
    if not items:
        return [*lines, "None proposed.", ""]
    lines += [
        f"{i}. {md_code(r.action)}: {md_text(r.rationale)} ({md_text(', '.join(r.codes))})"
        for i, r in enumerate(items, 1)
    ]
    return [*lines, ""]


def _missing(d: Diagnosis) -> list[str]:
    if not d.missing_evidence:
        return []
    lines = ["### Missing evidence", ""]
    lines += [f"- {md_text(m.what)}: {md_text(m.would_decide)}" for m in d.missing_evidence]
    return [*lines, ""]


def render_markdown(d: Diagnosis) -> str:
    """The compact report: verdict, reconciliation, top findings, remedies, what is missing."""
    lines = [
        *_verdict(d),
        *_reconciliation(d),
        *_fleet(d),
        *_findings(d),
        *_remedies(d),
        *_missing(d),
        f"_kvdiag {md_text(d.kvdiag_version)}; paths relative to the incident folder._",
    ]
    return "\n".join(lines) + "\n"
