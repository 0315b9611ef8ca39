"""The Markdown form of a comparison, for a ticket or a pull request."""

from __future__ import annotations

from kvdiag.domain.records.comparison import BeforeAfter
from kvdiag.reports.comparison import view as cv
from kvdiag.reports.markdown import md_code, md_text, table

_HEADER = ("quantity", "BEFORE", "AFTER", "change", "", "sources")


def _quantities(rows: list[cv.QuantityRow]) -> list[str]:
    return table(
        _HEADER,
        (
            (
                md_text(q.name),
                md_text(q.before),
                md_text(q.after),
                md_text(q.change),
                f"**{q.verdict}**" if q.verdict else "",
                md_text(q.sources),
            )
            for q in rows
        ),
        "lrrrll",
    )


def _changes(r: BeforeAfter) -> list[str]:
    if not r.changes:
        return ["No setting differs.", ""]
    return table(
        ("setting", "BEFORE", "AFTER", "from (BEFORE)", "from (AFTER)"),
        (
            (
                md_text(cv.setting_name(c)),
                md_code(cv.setting_value(c, c.before)),
                md_code(cv.setting_value(c, c.after)),
                md_code(c.source_before),
                md_code(c.source_after),
            )
            for c in r.changes
        ),
    )


def _layers(r: BeforeAfter) -> list[str]:
    lines: list[str] = []
    for layer in r.layers:
        lines += [
            f"### {layer.layer}. {md_text(layer.title)}: "
            f"{layer.status_before} → {layer.status_after}",
            "",
            f"- BEFORE: {md_text(layer.conclusion_before or '—')}",
            f"- AFTER: {md_text(layer.conclusion_after or '—')}",
            "",
            *_quantities(cv.quantity_rows(layer.quantities)),
        ]
    return lines


def _remedies(r: BeforeAfter) -> list[str]:
    if not r.remedies:
        return ["kvdiag proposed no remedy for BEFORE.", ""]
    return table(
        ("rule", "remedy", "applied", "effect"),
        ((x.code, md_text(x.action), cv.applied_word(x), md_text(x.effect)) for x in r.remedies),
    )


def render_compare_markdown(r: BeforeAfter) -> str:
    lines = [
        "# kvdiag compare",
        "",
        f"- **BEFORE** {md_code(r.before.label)}: {md_text(cv.verdict_line(r, 'before'))}",
        f"- **AFTER** {md_code(r.after.label)}: {md_text(cv.verdict_line(r, 'after'))}",
        "",
        f"## Outcome: **{r.outcome.value}**",
        "",
        md_text(r.summary),
        "",
        *(f"- {md_text(x)}" for x in r.reasons),
        "",
        "## Was it the same load?",
        "",
        md_text(cv.load_sentence(r)),
        "",
        *(f"- {md_text(n)}" for n in r.load.notes),
        *([""] if r.load.notes else []),
        *_quantities(cv.quantity_rows(r.load.quantities)),
        "## What changed",
        "",
        *_changes(r),
        "## Outcome for the users",
        "",
        *_quantities(cv.quantity_rows(r.outcomes)),
        "## The three layers",
        "",
        *_layers(r),
        "## BEFORE's remedies, checked",
        "",
        *_remedies(r),
        f"_kvdiag {md_text(r.kvdiag_version)}, compare schema {r.schema_version}_",
    ]
    return "\n".join(lines) + "\n"
