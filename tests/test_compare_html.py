"""The HTML report of `kvdiag compare` on real pairs: what it shows, that it stays safe, and
that a real headless Chromium draws its overlay charts.

The pairs: vllm-c (prefix caching off) -> vllm-c2 (on), the same load: fixed; the same two
swapped: regressed; a ticket-only copy of vllm-b (no time series) -> vllm-b: not comparable,
and BEFORE has no line in any chart.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import html
import os
import re
from pathlib import Path
from typing import Any

import pytest

from kvdiag.compare import compare_runs
from kvdiag.compare.sides import RunEvidence, read_run
from kvdiag.domain.records.comparison import BeforeAfter, Outcome, SettingChange
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.reports import OutputFormat
from kvdiag.reports.charts import epoch
from kvdiag.reports.comparison.charts import relative_label
from kvdiag.reports.comparison.html import render_compare_html
from kvdiag.reports.comparison.render import render_compare
from tests import test_browser as browsing
from tests.conftest import FIXTURES
from tests.goldens import PINNED_MTIME

NO_PREFIX, PREFIX = "vllm-c-prefill-peak-noprefix", "vllm-c2-prefill-peak-prefix"
TICKET_ONLY, SATURATED = "vllm-b-ticket-headerless-bodies", "vllm-b-saturation"
SECTIONS = ("outcome", "verdict-before", "verdict-after", "load", "changes", "outcomes")
SECTIONS += ("layers", "remedies", "overlay")
OVERLAYS = ("overlay-usage", "overlay-requests", "overlay-preemptions", "overlay-latency")


def _incident(name: str) -> Path:
    """The fixture's incident folder, its files dated as the goldens pin them (a log
    without a year takes it from the file's date)."""
    folder = FIXTURES / name / "incident"
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mtime != PINNED_MTIME:
            os.utime(path, (PINNED_MTIME, PINNED_MTIME))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunEvidence]:
    """Each fixture analysed once for the module (an analysis takes seconds)."""
    scratch = tmp_path_factory.mktemp("compare-scratch")
    return {
        name: read_run(_incident(name), AnalyzeOptions(incident=Path(".")), scratch)
        for name in (NO_PREFIX, PREFIX, TICKET_ONLY, SATURATED)
    }


@pytest.fixture(scope="module")
def fixed(runs: dict[str, RunEvidence]) -> BeforeAfter:
    return compare_runs(runs[NO_PREFIX], runs[PREFIX])


@pytest.fixture(scope="module")
def swapped(runs: dict[str, RunEvidence]) -> BeforeAfter:
    return compare_runs(runs[PREFIX], runs[NO_PREFIX])


@pytest.fixture(scope="module")
def one_side_empty(runs: dict[str, RunEvidence]) -> BeforeAfter:
    return compare_runs(runs[TICKET_ONLY], runs[SATURATED])


def _element(page: str, tag: str, ident: str) -> str:
    """The markup of the element with this id (its tag is not nested in itself here)."""
    found = re.search(rf'<{tag}\b[^>]*\bid="{ident}"[^>]*>(.*?)</{tag}>', page, re.S)
    assert found, f"no <{tag} id={ident}>"
    return found.group(1)


def _text(markup: str) -> str:
    """What a reader sees: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _row(table: str, first_cell: str) -> str:
    """The markup of the table row whose first cell reads `first_cell`."""
    for row in re.findall(r"<tr\b[^>]*>.*?</tr>", table, re.S):
        if _cells(row) and _cells(row)[0] == first_cell:
            return row
    raise AssertionError(f"no row {first_cell!r}")


def _cells(row: str) -> list[str]:
    return [_text(cell) for cell in re.findall(r"<td\b[^>]*>(.*?)</td>", row, re.S)]


def test_fixed_pair_names_the_outcome_and_the_change(fixed: BeforeAfter) -> None:
    page = render_compare_html(fixed)
    assert fixed.outcome is Outcome.FIXED
    outcome = re.search(r'<section class="verdict (\w+)" id="outcome"', page)
    assert outcome and outcome.group(1) == "ok"  # coloured as a healthy verdict
    banner = _text(_element(page, "section", "outcome"))
    assert banner.startswith("Outcome Fixed") and fixed.summary in banner
    changes = _element(page, "section", "changes")
    row = _cells(_row(changes, "--enable-prefix-caching enable_prefix_caching"))
    assert row[1:3] == ["False", "True"]  # BEFORE's value, then AFTER's
    assert all(re.fullmatch(r"metrics/[\d.]+\.prom:\d+", where) for where in row[3:])
    assert "Prefill peak" in _text(_element(page, "section", "verdict-before"))
    assert "Healthy" in _text(_element(page, "section", "verdict-after"))


def test_every_section_is_there(fixed: BeforeAfter) -> None:
    page = render_compare_html(fixed)
    for ident in SECTIONS:
        assert _text(_element(page, "section", ident)), ident
    load = _text(_element(page, "section", "load"))
    assert load.startswith("Was it the same load? The same load:") and "within 15%" in load
    layers = _element(page, "section", "layers")
    assert len(re.findall(r'<article class="layer-compare"', layers)) == len(fixed.layers) == 3
    statuses = [_text(h) for h in re.findall(r"<h3>(.*?)</h3>", layers, re.S)]
    assert statuses[2] == "3 · Peak demand vs pool problem → ok"
    remedies = _element(page, "section", "remedies")
    applied = {_action(row): _cells(row)[1] for row in _rows(remedies)}
    expected = {
        x.action: {True: "applied", False: "not applied", None: "cannot tell"}[x.applied]
        for x in fixed.remedies
    }
    assert applied == expected and applied["--enable-prefix-caching"] == "applied"


def _action(row: str) -> str:
    found = re.search(r'<span class="mono">(.*?)</span>', row)
    assert found
    return html.unescape(found.group(1))


def _rows(table: str) -> list[str]:
    return [row for row in re.findall(r"<tr\b[^>]*>.*?</tr>", table, re.S) if "<td" in row]


@pytest.mark.parametrize("pair", ["fixed", "swapped"])
def test_outcomes_say_better_or_worse_in_words(pair: str, request: pytest.FixtureRequest) -> None:
    r: BeforeAfter = request.getfixturevalue(pair)
    table = _element(render_compare_html(r), "section", "outcomes")
    expected = {"after": "better", "before": "worse", None: "—"}
    for q in r.outcomes:
        row = _row(table, q.name)
        word = expected[q.better]
        assert _cells(row)[4] == word, q.name
        if q.better:  # the word and the colour, never the colour alone
            assert (
                f'<tr class="{word}">' in row and f'<span class="mark {word}">{word}</span>' in row
            )
    marks = {q.better for q in r.outcomes}
    assert ("before" in marks) == (pair == "swapped") and ("after" in marks) == (pair == "fixed")


def test_swapped_pair_is_red(swapped: BeforeAfter) -> None:
    page = render_compare_html(swapped)
    assert swapped.outcome is Outcome.REGRESSED
    assert '<section class="verdict bad" id="outcome"' in page
    assert _text(_element(page, "section", "outcome")).startswith("Outcome Regressed")


def test_overlay_draws_both_runs_on_one_relative_axis(fixed: BeforeAfter) -> None:
    page = render_compare_html(fixed)
    for ident in OVERLAYS:
        figure = _element(page, "figure", f"chart-{ident}")
        legend = [_text(li) for li in re.findall(r"<li>(.*?)</li>", figure, re.S)]
        runs = [entry.split(" peak ")[0] for entry in legend]
        if ident == "overlay-requests":
            assert runs == ["BEFORE running", "BEFORE waiting", "AFTER running", "AFTER waiting"]
        else:
            assert runs == ["BEFORE", "AFTER"]
        styles = re.findall(r'<polyline class="series (s\d)"', figure)
        assert set(styles) == ({"s0", "s1", "s2", "s3"} if len(runs) == 4 else {"s0", "s1"})
        assert ">+0:00<" in figure and ">+0:30<" in figure
    # Both runs began scraping ~19 s before their load, three minutes apart on the clock:
    # relative to each load start their first points fall together, left of +0:00.
    usage = _element(page, "figure", "chart-overlay-usage")
    first_x = [float(p.split(",")[0]) for p in re.findall(r'points="([\d.]+,[\d.]+)', usage)]
    zero = re.search(r'<text x="([\d.]+)"[^>]*>\+0:00</text>', usage)
    assert zero
    zero_x = float(zero.group(1))
    assert abs(first_x[0] - first_x[1]) < 3 and max(first_x) < zero_x
    start_gap = epoch(fixed.after.series[0].points[0][0]) - epoch(
        fixed.before.series[0].points[0][0]
    )
    assert start_gap > 150  # the clock times really differ: a shared clock axis would not do


def test_relative_tick_labels() -> None:
    assert [relative_label(s) for s in (0, 30, 120, 3900, -15)] == [
        "+0:00",
        "+0:30",
        "+2:00",
        "+1:05:00",
        "-0:15",
    ]


def test_a_run_without_series_has_no_line_and_says_so(one_side_empty: BeforeAfter) -> None:
    assert not one_side_empty.before.series and one_side_empty.after.series
    page = render_compare_html(one_side_empty)
    overlay = _element(page, "section", "overlay")
    assert "BEFORE has no time series" in _text(overlay)
    for ident in OVERLAYS:
        figure = _element(page, "figure", f"chart-{ident}")
        assert "BEFORE" not in _text(figure) and "AFTER" in _text(figure)
    assert _text(overlay).count("No BEFORE line: that run's inputs lack") == len(OVERLAYS)


def test_no_series_at_all_says_what_each_chart_needs(one_side_empty: BeforeAfter) -> None:
    bare = dataclasses.replace(one_side_empty.after.diagnosis, series=())
    r = dataclasses.replace(
        one_side_empty, after=dataclasses.replace(one_side_empty.after, diagnosis=bare)
    )
    overlay = _element(render_compare_html(r), "section", "overlay")
    assert '<svg class="chart"' not in overlay
    needs = re.findall(r'<p class="empty">No data: needs (.*?)\.</p>', overlay)
    assert len(needs) == len(OVERLAYS) and "request_queue_time histogram" in needs[-1]


def test_csp_pins_the_inlined_stylesheet_and_there_is_no_script(fixed: BeforeAfter) -> None:
    page = render_compare_html(fixed)
    css = re.search(r"<style>(.*?)</style>", page, re.S)
    assert css
    digest = base64.b64encode(hashlib.sha256(css.group(1).encode()).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    policy = html.unescape(csp.group(1)) if csp else ""
    assert f"style-src 'sha256-{digest}'" in policy and "script-src 'none'" in policy
    assert "<script" not in page.lower() and "javascript:" not in page.lower()
    assert render_compare(fixed, OutputFormat.HTML) == page


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_hostile_text_stays_text(fixed: BeforeAfter) -> None:
    before = dataclasses.replace(fixed.before, label=HOSTILE + "\x1b]0;title\x07")
    change = SettingChange("model", HOSTILE, "b\u202eevil", "server.log:1", "server.log:1")
    r = dataclasses.replace(fixed, before=before, changes=(*fixed.changes, change))
    page = render_compare_html(r)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert html.escape(HOSTILE, quote=False) in page.replace("&#34;", '"').replace("&#39;", "'")
    assert "\x1b" not in page and "\x07" not in page and "\u202e" not in page
    assert HOSTILE in _text(_row(_element(page, "section", "changes"), "model"))


@pytest.mark.browser
def test_report_renders_the_overlay_in_chromium(
    fixed: BeforeAfter, one_side_empty: BeforeAfter, tmp_path: Path
) -> None:
    sync_api = browsing._require_chromium()  # the analysis report's skip and CI rules
    shots = Path(os.environ.get("KVDIAG_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=str(browsing.CHROMIUM),
            headless=True,
            args=browsing.FLAGS,
            offline=True,
            viewport={"width": 1200, "height": 900},
        )
        context.set_default_timeout(20_000)
        try:
            for name, r in (("compare-fixed", fixed), ("compare-one-side", one_side_empty)):
                report = tmp_path / f"{name}.html"
                report.write_text(render_compare_html(r))
                _check_in_browser(browsing._open(context, report), r, shots / f"{name}.png")
        finally:
            context.close()


def _check_in_browser(visit: Any, r: BeforeAfter, shot: Path) -> None:
    page = visit.page
    try:
        banner = page.locator("#outcome .class")
        assert (
            banner.is_visible()
            and banner.inner_text() == r.outcome.value.replace("_", " ").capitalize()
        )
        # The two verdicts stand side by side: same top, BEFORE on the left.
        left, right = (page.locator(f"#verdict-{s}").bounding_box() for s in ("before", "after"))
        assert left and right and abs(left["y"] - right["y"]) < 1 and left["x"] < right["x"]
        charts = page.locator("#overlay svg.chart")
        assert charts.count() == len(OVERLAYS)
        box = charts.first.bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 80
        lines = page.locator("#overlay svg.chart polyline")
        sides = 2 if r.before.series else 1
        assert lines.count() >= sides * (len(OVERLAYS) + 1)
        assert lines.first.bounding_box() is not None  # drawn, not just in the markup
        page.screenshot(path=str(shot), full_page=True)
        browsing._assert_quiet(visit)
    finally:
        page.close()
