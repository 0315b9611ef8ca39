"""Every fixture's HTML report in a real headless Chromium, with the network cut off.

Debian's chromium (/usr/bin/chromium; .ci/run installs it) driven by Playwright. Skipped
with the reason on a machine without it, never in CI. Screenshots and print-to-PDF output
go to $KVDIAG_SCREENSHOTS, default <tmp>/kvdiag-report-screenshots; the test prints the
path (`pytest -s` shows it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.reports import view
from kvdiag.reports.charts import line_charts
from tests import hostile_incident
from tests.conftest import FixtureCase, fixture_cases, run_cli
from tests.goldens import fixture_diagnosis

pytestmark = pytest.mark.browser

CHROMIUM = Path(os.environ.get("KVDIAG_CHROMIUM", "/usr/bin/chromium"))
# The machine's closed network refuses Chromium's background connections; these keep it
# from trying, so any request left is one the report made.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CASES = fixture_cases()


def _require_chromium() -> Any:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} absent: `apt-get install chromium` to run the browser test"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test, but {reason} (.ci/run installs it)")
        pytest.skip(reason)
    return pytest.importorskip("playwright.sync_api", reason="playwright is in the test extras")


@dataclass
class Visit:
    """What happened while one report was open."""

    page: Any
    url: str
    console: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sync_api = _require_chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh --user-data-dir
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=FLAGS,
            offline=True,
            viewport={"width": 1200, "height": 900},
        )
        context.set_default_timeout(20_000)
        yield context
        context.close()


@pytest.fixture(scope="module")
def shots() -> Path:
    """A stable folder (pytest's own temp folders are pruned after three runs)."""
    default = Path(tempfile.gettempdir()) / "kvdiag-report-screenshots"
    folder = Path(os.environ.get("KVDIAG_SCREENSHOTS", default))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nbrowser screenshots and PDFs: {folder}")
    return folder


def _open(browser: Any, report: Path) -> Visit:
    page = browser.new_page()
    visit = Visit(page, report.as_uri())
    page.on("console", lambda m: visit.console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: visit.console.append(f"pageerror: {e}"))
    page.on("dialog", lambda d: (visit.dialogs.append(d.message), d.dismiss()))

    def route(r: Any) -> None:
        visit.requests.append(r.request.url)
        if r.request.url == visit.url:
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    page.goto(visit.url, wait_until="load")
    return visit


def _assert_quiet(visit: Visit) -> None:
    assert visit.requests == [visit.url], f"the report requested more: {visit.requests}"
    assert not visit.console, visit.console
    assert not visit.dialogs, visit.dialogs


def _assert_shows(visit: Visit, d: Diagnosis) -> None:
    page = visit.page
    banner = page.locator("#verdict .class")
    assert banner.is_visible()
    assert banner.inner_text().startswith(view.headline(d.verdict.primary))
    assert page.locator("#verdict .summary").inner_text() == d.verdict.summary
    rows = page.locator("table.reconciliation tbody tr")
    assert rows.count() >= 3 and rows.first.is_visible()
    charts = page.locator("svg.chart")
    if d.series:
        # One SVG per chart group with data; the others say what they would need.
        assert charts.count() == sum(1 for c in line_charts(d.series, d.window) if c.lines)
        box = charts.first.bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 80
        drawn = (
            page.locator("svg.chart polyline").count() + page.locator("svg.chart circle").count()
        )
        assert drawn >= len(d.series)
    evidence = page.locator("table.evidence tbody tr")
    assert evidence.count() == sum(len(f.evidence) for f in d.findings)
    if evidence.count():
        assert evidence.first.is_visible()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_report_opens_offline_and_shows_everything(
    browser: Any, shots: Path, tmp_path: Path, case: FixtureCase
) -> None:
    report = tmp_path / "report.html"
    expected = fixture_diagnosis(case.name)  # first: it pins the files' dates (tests/goldens.py)
    result = run_cli("analyze", str(case.incident), "--format", "html", "-o", str(report), "-q")
    assert result.exit_code in (0, 1), result.stderr
    visit = _open(browser, report)
    try:
        _assert_shows(visit, expected)
        visit.page.screenshot(path=str(shots / f"{case.name}.png"), full_page=True)
        pdf = shots / f"{case.name}.pdf"
        visit.page.pdf(path=str(pdf), format="A4", print_background=True)
        assert pdf.read_bytes().startswith(b"%PDF")
        _assert_quiet(visit)
    finally:
        visit.page.close()


def test_xss_payloads_stay_text_in_the_browser(browser: Any, shots: Path, tmp_path: Path) -> None:
    folder = hostile_incident.build(tmp_path)
    report = tmp_path / "hostile.html"
    result = run_cli("analyze", str(folder), "--format", "html", "-o", str(report), "-q")
    assert result.exit_code == 1, result.stderr
    visit = _open(browser, report)
    try:
        for payload in (*hostile_incident.VISIBLE, hostile_incident.LABEL_PAYLOAD):
            assert visit.page.get_by_text(payload, exact=False).count() >= 1, payload
        visit.page.screenshot(path=str(shots / "hostile.png"), full_page=True)
        _assert_quiet(visit)
    finally:
        visit.page.close()
