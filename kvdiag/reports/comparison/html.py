"""The self-contained HTML report of `kvdiag compare`: one file, no script, CSS inlined.

It is the analysis report's sibling (html.py): the same Jinja environment (autoescape, control
characters stripped from every printed value), the same stylesheet plus compare.css, the same
Content-Security-Policy pinned to the stylesheet's hash, and the same SVG chart macro.
Values are formatted here; the template only places and escapes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from markupsafe import Markup

from kvdiag.domain import fmt
from kvdiag.domain.records.comparison import (
    BeforeAfter,
    LayerChange,
    Outcome,
    RemedyCheck,
    SettingChange,
    Side,
)
from kvdiag.reports import view
from kvdiag.reports.comparison import view as cv
from kvdiag.reports.comparison.charts import SIDE_NAMES, RunZero, overlay_charts
from kvdiag.reports.html import _environment, content_security_policy, stylesheet

# The banner's class in report.css, as the analysis verdict's: ok (green), unknown (amber),
# bad (red); compare_view's OUTCOME_TONE says "warn" where this stylesheet says "unknown".
OUTCOME_TONES = {
    Outcome.FIXED: "ok",
    Outcome.IMPROVED: "ok",
    Outcome.UNCHANGED: "unknown",
    Outcome.NOT_COMPARABLE: "unknown",
    Outcome.REGRESSED: "bad",
}
APPLIED_STYLES = {True: "ok", False: "warning", None: "skipped"}


@dataclass(frozen=True, slots=True)
class SideView:
    name: str  # BEFORE | AFTER
    label: str
    headline: str
    tone: str
    confidence: str
    summary: str
    classes: str
    window: str


@dataclass(frozen=True, slots=True)
class ChangeRow:
    setting: str
    flag: str
    before: str
    after: str
    source_before: str
    source_after: str


@dataclass(frozen=True, slots=True)
class LayerRow:
    layer: int
    title: str
    status_before: str
    status_after: str
    words_before: str
    words_after: str
    conclusion_before: str
    conclusion_after: str
    rows: tuple[cv.QuantityRow, ...]


@dataclass(frozen=True, slots=True)
class RemedyRow:
    code: str
    action: str
    rationale: str
    applied: str
    applied_style: str
    setting: str  # "--flag: before -> after (proposed x)" or "" when not a readable setting
    effect: str


def side_view(name: str, side: Side) -> SideView:
    d = side.diagnosis
    v = d.verdict
    return SideView(
        name=name,
        label=side.label,
        headline=view.headline(v.primary),
        tone=view.verdict_tone(d),
        confidence=v.confidence.value,
        summary=v.summary,
        classes=", ".join(fmt.humanise(c.value) for c in v.classes) or "none",
        window=fmt.fmt_window(d.window, bool(d.series)),
    )


def outcome_word(outcome: Outcome) -> str:
    """ "Fixed", "Not comparable"."""
    return fmt.humanise(outcome.value).capitalize()


def _remedy_value(setting: str, value: str | None) -> str:
    """A remedy's setting value as read; byte counts humanised (17825792 -> 17 MiB)."""
    if value is None:
        return "not stated"
    if setting.endswith("_bytes"):
        try:
            return fmt.fmt_quantity(float(value), "bytes")
        except ValueError:
            return value
    return value


def change_row(c: SettingChange) -> ChangeRow:
    return ChangeRow(
        setting=c.setting,
        flag=c.flag or "",
        before=cv.setting_value(c, c.before),
        after=cv.setting_value(c, c.after),
        source_before=c.source_before or "—",
        source_after=c.source_after or "—",
    )


def layer_row(layer: LayerChange) -> LayerRow:
    def words(status: str) -> str:
        return view.STATUS_WORDS.get(status, fmt.humanise(status))

    return LayerRow(
        layer=layer.layer,
        title=layer.title,
        status_before=layer.status_before,
        status_after=layer.status_after,
        words_before=words(layer.status_before),
        words_after=words(layer.status_after),
        conclusion_before=layer.conclusion_before,
        conclusion_after=layer.conclusion_after,
        rows=tuple(cv.quantity_rows(layer.quantities)),
    )


def _remedy_setting(r: RemedyCheck) -> str:
    if r.setting is None:
        return ""
    before, after = (_remedy_value(r.setting, v) for v in (r.before, r.after))
    proposed = f" (proposed {_remedy_value(r.setting, r.proposed)})" if r.proposed else ""
    return f"{r.setting}: {before} -> {after}{proposed}"


def remedy_row(r: RemedyCheck) -> RemedyRow:
    applied, style = cv.applied_word(r), APPLIED_STYLES[r.applied]
    return RemedyRow(r.code, r.action, r.rationale, applied, style, _remedy_setting(r), r.effect)


def zero_note(zeros: tuple[RunZero, ...]) -> str:
    """How each run's time was shifted: from its load start, or from its first sample."""
    parts = []
    for z in zeros:
        if z.iso is None:
            parts.append(f"{z.side} has no time series")
        elif z.from_load_start:
            parts.append(f"{z.side} from its load start, {fmt.fmt_time(z.iso)} UTC")
        else:
            parts.append(f"{z.side} from its first sample, {fmt.fmt_time(z.iso)} UTC")
    return "; ".join(parts)


@cache
def compare_stylesheet() -> str:
    """The analysis report's stylesheet and the comparison's few additions (kept apart so
    the analysis report, and its goldens, do not change with them)."""
    extra = resources.files("kvdiag.reports").joinpath("templates/compare.css").read_text()
    return stylesheet().rstrip("\n") + "\n\n" + extra


def render_compare_html(r: BeforeAfter) -> str:
    """The comparison as one HTML document."""
    css = compare_stylesheet()
    charts, zeros = overlay_charts(r)
    context = {
        "r": r,
        "css": Markup(css),  # our own stylesheet, shipped in the package: not input text
        "csp": content_security_policy(css),
        "outcome_word": outcome_word(r.outcome),
        "tone": OUTCOME_TONES[r.outcome],
        "sides": (side_view(SIDE_NAMES[0], r.before), side_view(SIDE_NAMES[1], r.after)),
        "load_sentence": cv.load_sentence(r),
        "load_rows": cv.quantity_rows(r.load.quantities),
        "changes": tuple(change_row(c) for c in r.changes),
        "outcomes": cv.quantity_rows(r.outcomes),
        "layers": tuple(layer_row(layer) for layer in r.layers),
        "remedies": tuple(remedy_row(x) for x in r.remedies),
        "charts": charts,
        "zero_note": zero_note(zeros),
    }
    return _environment().get_template("compare.html.j2").render(context)
