"""The self-contained HTML report: one file, CSS inlined, charts as inline SVG, no script.

Safety: the Jinja environment autoescapes every expression and strips control characters
from every value it prints, so text from inputs (log lines, file and label names) can only
ever appear as text. The Content-Security-Policy forbids scripts, remote loads and every
stylesheet but ours (pinned by its hash), in case something slipped through anyway.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from kvdiag.domain import fmt
from kvdiag.domain.ledger import TERMS
from kvdiag.domain.records.diagnosis import Diagnosis, Fact
from kvdiag.domain.safe_text import plain
from kvdiag.reports import charts, view
from kvdiag.reports.ledger import ledger_fact_names, memory_ledgers

# Facts shown as tiles under the verdict: the numbers an on-call engineer asks for first.
KEY_FACTS: tuple[tuple[str, str], ...] = (
    ("peak_kv_usage", "peak KV usage"),
    ("max_requests_waiting", "max waiting"),
    ("max_requests_running", "max running"),
    ("preemptions", "preemptions"),
    ("pool_tokens", "KV pool"),
    ("max_model_len", "max model len"),
)


def _finalize(value: Any) -> Any:
    """Every printed value loses control characters (Markup is ours and passes as is)."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return plain(value)


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("kvdiag.reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        quantity=fmt.fmt_quantity,
        value=fmt.fmt_value,
        time=fmt.fmt_time,
        words=fmt.humanise,
        coverage=fmt.coverage,
        finding_scope=view.finding_scope,
    )
    return env


@cache
def stylesheet() -> str:
    return resources.files("kvdiag.reports").joinpath("templates/report.css").read_text()


def content_security_policy(css: str) -> str:
    """No script, no network, no plugin, no form; only our stylesheet, pinned by hash."""
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    return (
        "default-src 'none'; script-src 'none'; connect-src 'none'; img-src data:; "
        f"style-src 'sha256-{digest}'; font-src 'none'; object-src 'none'; "
        "base-uri 'none'; form-action 'none'"
    )


def key_facts(d: Diagnosis) -> list[tuple[str, str, str]]:
    """(label, value, scope) tiles for the facts present."""
    tiles = []
    for name, label in KEY_FACTS:
        found = d.facts.get(name)
        for f in found if isinstance(found, tuple) else (found,) if found else ():
            assert isinstance(f, Fact)
            scope = " ".join(v for _, v in f.scope)
            tiles.append((label, fmt.fmt_quantity(f.value, f.unit), scope))
    return tiles


def _ledger_legend(chart: charts.LedgerChart | None) -> list[tuple[str, str]]:
    """(style, label) legend entries for the terms some bar shows, in the bars' order."""
    shown = {s.style for bar in (chart.bars if chart else ()) for s in bar.segments}
    legend = [(charts.term_style(t.key), t.bar_label) for t in TERMS]
    return [(style, label) for style, label in legend if f"m-{style}" in shown]


def render_html(d: Diagnosis) -> str:
    """The report as one HTML document."""
    css = stylesheet()
    ledgers = memory_ledgers(d)
    ledger_chart = charts.ledger_chart(ledgers)
    context = {
        "d": d,
        "css": Markup(css),  # our own stylesheet, shipped in the package: not input text
        "csp": content_security_policy(css),
        "headline": view.headline(d.verdict.primary),
        "tone": view.verdict_tone(d),
        "window": fmt.fmt_window(d.window, bool(d.series)),
        "tiles": key_facts(d),
        "layers": view.reconciliation(d),
        "fleet": view.fleet_rows(d),
        "fleet_summary": view.fleet_summary(d) if d.fleet else "",
        "charted_note": view.charted_note(d),
        "ledgers": ledgers,
        "ledger_chart": ledger_chart,
        "ledger_terms": _ledger_legend(ledger_chart),
        "ledger_facts": ledger_fact_names(),
        "charts": charts.line_charts(d.series, d.window, view.preemption_word(d)),
        "evictions": view.preemption_word(d).capitalize(),
        "time_axis": charts.time_axis(d.series, d.window),
        "remedies": view.remedies(d),
        "not_run": view.rules_not_run(d),
        "facts": view.fact_rows(d),
    }
    return _environment().get_template("report.html.j2").render(context)
