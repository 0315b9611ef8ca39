"""The HTML report: sections in order, self-contained, CSP, charts, ledger, reconciliation."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
from html.parser import HTMLParser

import pytest
from markupsafe import escape

from kvdiag.domain.records.diagnosis import Comparison, Diagnosis, Fact, LayerResult, SourceRef
from kvdiag.reports.charts import line_charts
from kvdiag.reports.html import render_html
from kvdiag.reports.ledger import memory_ledgers
from tests.conftest import fixture_cases
from tests.goldens import fixture_diagnosis

CASES = [c.name for c in fixture_cases()]
SECTIONS = [
    "verdict",
    "reconciliation",
    "memory",
    "timeline",
    "findings",
    "remedies",
    "inputs",
    "missing",
    "rules",
    "facts",
]


class Page(HTMLParser):
    """Every element with its attributes, the text inside <style>, the text shown."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.style = ""
        self.text = ""
        self._in_style = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data
        else:
            self.text += data

    def tags(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.elements if tag == name]


def _page(name: str) -> tuple[Diagnosis, str, Page]:
    d = fixture_diagnosis(name)
    html = render_html(d)
    return d, html, Page(html)


@pytest.mark.parametrize("name", CASES)
def test_sections_in_fixed_order(name: str) -> None:
    d, _, page = _page(name)
    ids = [a["id"] for t, a in page.elements if t == "section" and a.get("id")]
    # The fleet table follows the reconciliation when there are two or more replicas.
    expected = [*SECTIONS[:2], "fleet", *SECTIONS[2:]] if d.fleet else SECTIONS
    assert ids == expected


@pytest.mark.parametrize("name", CASES)
def test_self_contained_no_script_no_remote_load(name: str) -> None:
    _, _, page = _page(name)
    assert not page.tags("script") and not page.tags("link") and not page.tags("img")
    for tag, attrs in page.elements:
        assert "src" not in attrs, tag
        href = attrs.get("href")
        assert href is None or href.startswith("#"), (tag, href)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
    assert "url(" not in page.style and "@import" not in page.style


@pytest.mark.parametrize("name", CASES)
def test_csp_forbids_scripts_and_pins_the_stylesheet(name: str) -> None:
    _, _, page = _page(name)
    (meta,) = [m for m in page.tags("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    policy = meta["content"] or ""
    for directive in ("default-src 'none'", "script-src 'none'", "connect-src 'none'"):
        assert directive in policy
    digest = base64.b64encode(hashlib.sha256(page.style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in policy, "the <style> text no longer matches its hash"


@pytest.mark.parametrize("name", CASES)
def test_verdict_numbers_and_charts(name: str) -> None:
    d, html, page = _page(name)
    assert str(escape(d.verdict.summary)) in html
    polylines = page.tags("polyline")
    if d.series:
        drawn = sum(1 for c in line_charts(d.series, d.window) if c.lines)
        assert len([s for s in page.tags("svg") if s.get("class") == "chart"]) == drawn
        # Lone samples (a window of one instant, as in a pasted fragment) are dots, not lines.
        assert polylines or page.tags("circle"), "series present but nothing drawn"
    else:
        assert not polylines
        assert "No time series in the inputs" in html


def test_incident_window_band_on_every_chart_with_data() -> None:
    d, _, page = _page("vllm-b-saturation")
    assert d.window is not None
    bands = [a for t, a in page.elements if t == "rect" and a.get("class") == "band"]
    assert len({s.name for s in d.series}) == 8  # 8 series drawn on 5 charts
    assert len(bands) == 2 * 5  # per chart: the band and its legend swatch


def test_evidence_rows_cite_every_evidence() -> None:
    d, html, _ = _page("vllm-b-saturation")
    cells = re.findall(r'<td class="mono nowrap">([^<]+)</td>', html)
    cited = [f"{e.path}:{e.line}" for f in d.findings for e in f.evidence]
    assert cited and cells == cited


def test_reconciliation_not_checked_when_empty_and_numbers_when_filled() -> None:
    d = dataclasses.replace(fixture_diagnosis("vllm-b-saturation"), reconciliation=())
    empty = render_html(d)
    assert empty.count('class="badge not_checked"') == 3
    layer = LayerResult(
        layer=3,
        title="Peak demand vs pool",
        status="problem",
        conclusion="worst-case demand is 9.3x the pool",
        comparisons=(
            Comparison(
                "worst_case_tokens", 8704, 81051, 72347, "tokens", (SourceRef("server.log", 51),)
            ),
        ),
    )
    filled = render_html(dataclasses.replace(d, reconciliation=(layer,)))
    assert filled.count('class="badge not_checked"') == 2
    assert 'class="badge problem"' in filled
    for text in ("81,051 tokens", "72,347 tokens", "worst case tokens", "server.log:51"):
        assert text in filled, text


def _gpu_facts() -> dict[str, Fact | tuple[Fact, ...]]:
    gib = 2**30
    src = SourceRef("nvidia-smi.csv", 2)
    return {
        "gpu_total_bytes": tuple(
            Fact(80 * gib, "bytes", src, scope=(("gpu", g),)) for g in ("0", "1")
        ),
        "weights_bytes": Fact(13.5, "GiB", SourceRef("server.log", 40)),
        "pool_bytes": (
            Fact(18 * gib, "bytes", src, scope=(("gpu", "0"),)),
            Fact(41 * gib, "bytes", src, scope=(("gpu", "1"),)),
        ),
        "gpu_free_bytes": Fact(22 * 1024, "MiB", src, scope=(("gpu", "0"),)),
    }


def test_memory_ledger_per_gpu_says_what_is_absent() -> None:
    d = dataclasses.replace(fixture_diagnosis("vllm-a-healthy"), facts=_gpu_facts())
    ledgers = memory_ledgers(d)
    assert [g.name for g in ledgers] == ["GPU 0", "GPU 1"]
    gpu0, gpu1 = ledgers
    assert [e.key for e in gpu0.entries] == ["weights", "kv_pool", "free"]
    assert gpu0.unattributed == pytest.approx((80 - 13.5 - 18 - 22) * 2**30)
    assert "free" in gpu1.absent and "activation peak" in gpu1.absent
    html = render_html(d)
    page = Page(html)
    segments = [a for t, a in page.elements if t == "rect" and "seg" in (a.get("class") or "")]
    assert len(segments) == 4 + 3  # GPU 0: 3 terms + not attributed; GPU 1: 2 terms + rest
    assert "Not in the inputs: activation peak" in html


def test_no_gpu_facts_says_so() -> None:
    html = render_html(fixture_diagnosis("vllm-b-saturation"))
    assert "No per-GPU memory in the inputs" in html


@pytest.mark.parametrize(
    ("name", "word"),
    [("sglang-saturation-retract", "Retractions"), ("vllm-b-saturation", "Preemptions")],
)
def test_eviction_chart_speaks_the_engines_word(name: str, word: str) -> None:
    """SGLang retracts where vLLM preempts; the chart says which, and never the other."""
    _, html, _ = _page(name)
    other = {"Retractions": "Preemptions", "Preemptions": "Retractions"}[word]
    assert f"{word} (cumulative)" in html
    assert f"{other} (cumulative)" not in html
