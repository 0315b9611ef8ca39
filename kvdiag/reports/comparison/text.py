"""The terminal summary of `kvdiag compare`: outcome, load, changes, users' numbers, layers,
BEFORE's remedies checked."""

from __future__ import annotations

from collections.abc import Iterator

from kvdiag.domain.records.comparison import BeforeAfter
from kvdiag.domain.safe_text import one_line
from kvdiag.reports.comparison import view as cv
from kvdiag.reports.text import Painter

_TONE = {"ok": "green", "bad": "red", "warn": "yellow"}
_VERDICT = {"better": "green", "worse": "red"}


def _table(rows: list[cv.QuantityRow], paint: Painter) -> Iterator[str]:
    yield f"    {'':<46}{'BEFORE':>20} {'AFTER':>20}  CHANGE"
    for q in rows:
        mark = paint(q.verdict, _VERDICT[q.verdict]) if q.verdict else ""
        yield (
            f"    {one_line(q.name)[:45]:<46}{one_line(q.before):>20} {one_line(q.after):>20}"
            f"  {q.change:<9}{mark}"
        )


def render_compare_text(r: BeforeAfter, *, color: bool = False) -> str:
    paint = Painter(color)
    tone = _TONE[cv.OUTCOME_TONE[r.outcome]]
    lines = [
        paint(f"kvdiag {r.kvdiag_version} — compare", "bold"),
        f"  BEFORE {one_line(r.before.label)}: {cv.verdict_line(r, 'before')}",
        f"  AFTER  {one_line(r.after.label)}: {cv.verdict_line(r, 'after')}",
        "",
        f"OUTCOME  {paint(r.outcome.value, 'bold', tone)}",
        f"  {one_line(r.summary)}",
        *(f"  - {one_line(x)}" for x in r.reasons),
        "",
        paint("LOAD", "bold") + f"  {cv.load_sentence(r)}",
        *(f"  - {one_line(n)}" for n in r.load.notes),
        *_table(cv.quantity_rows(r.load.quantities), paint),
        "",
        paint("CHANGED SETTINGS", "bold"),
    ]
    for c in r.changes:
        lines.append(
            f"  {one_line(cv.setting_name(c))}: {one_line(cv.setting_value(c, c.before))} -> "
            f"{one_line(cv.setting_value(c, c.after))}"
            f"  ({one_line(c.source_before)} | {one_line(c.source_after)})"
        )
    if not r.changes:
        lines.append("  none")
    lines += [
        "",
        paint("OUTCOME FOR THE USERS", "bold"),
        *_table(cv.quantity_rows(r.outcomes), paint),
    ]
    lines += ["", paint("LAYERS", "bold")]
    for layer in r.layers:
        lines.append(
            f"  {layer.layer} {layer.title}: {layer.status_before} -> {layer.status_after}"
        )
        lines += list(_table(cv.quantity_rows(layer.quantities), paint))
    if r.remedies:
        lines += ["", paint("BEFORE'S REMEDIES, CHECKED", "bold")]
        lines += [
            f"  {x.code} {one_line(x.action)}: {cv.applied_word(x)} — {one_line(x.effect)}"
            for x in r.remedies
        ]
    return "\n".join(lines) + "\n"
