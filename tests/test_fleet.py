"""The fleet view against a real Prometheus: 50 replicas replayed from real runs, two hot.

48 replicas replay three real healthy runs with different loads (a: a few short requests
in a roomy pool; c2: long shared prompts with prefix caching; h2: 60 short sequences in
32-token blocks), staggered by a few seconds; two replay real saturated runs (b, i). Only
the series the live source fetches are backfilled. The fleet table must put the two hot
replicas first, flag exactly them, and give every replica its own verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kvdiag.analyzer.model.chart_series import MAX_CHARTED_REPLICAS
from kvdiag.domain.records.diagnosis import IncidentClass
from tests.conftest import FIXTURES, run_cli
from tests.live_support import (
    PrometheusServer,
    Replay,
    binaries,
    planned_names,
    scrape_files,
    serve,
)

pytestmark = pytest.mark.slow

NORMAL = ("vllm-a-healthy", "vllm-c2-prefill-peak-prefix", "vllm-h2-padding-block32")
HOT = {"replica-17": "vllm-b-saturation", "replica-33": "vllm-i-ramp"}
REPLICAS = 50
T0 = 1_796_000_000.0  # every replay starts within seconds of this


def _scrapes(run: str) -> Any:
    return FIXTURES / run / "incident" / "metrics"


def _replays() -> list[Replay]:
    names = planned_names()
    out = []
    for i in range(REPLICAS):
        instance = f"replica-{i:02d}"
        run = HOT.get(instance, NORMAL[i % len(NORMAL)])
        first = scrape_files(_scrapes(run))[0][0]
        shift = T0 + (i % 7) - first
        out.append(Replay(_scrapes(run), "fleet", instance, shift, keep=names.__contains__))
    return out


@pytest.fixture(scope="module")
def fleet_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    binaries()
    server = serve(_replays(), tmp_path_factory.mktemp("fleet"))
    yield server
    server.stop()


def _analyze(server: PrometheusServer, fmt: str) -> tuple[int, str]:
    longest = max(
        scrape_files(_scrapes(r))[-1][0] - scrape_files(_scrapes(r))[0][0]
        for r in (*NORMAL, *HOT.values())
    )
    result = run_cli(
        "analyze",
        "--prometheus",
        server.url,
        "--since",
        f"{T0 - 0.5:.1f}",
        "--until",
        f"{T0 + longest + 7.5:.1f}",
        "--selector",
        '{job="fleet"}',
        "--format",
        fmt,
        "-q",
    )
    return result.exit_code, result.stdout


@pytest.fixture(scope="module")
def fleet_json(fleet_prometheus: PrometheusServer) -> dict[str, Any]:
    _, out = _analyze(fleet_prometheus, "json")
    return dict(json.loads(out))


def test_every_replica_has_its_own_verdict(fleet_json: dict[str, Any]) -> None:
    rows = fleet_json["fleet"]
    assert len(rows) == REPLICAS
    verdicts = {r["replica"]: r["primary"] for r in rows}
    for name in HOT:
        assert verdicts[name] == IncidentClass.SATURATION.value
    others = {v for name, v in verdicts.items() if name not in HOT}
    assert others == {IncidentClass.HEALTHY.value}, others


def test_the_fleet_table_names_the_hot_replicas_first(fleet_json: dict[str, Any]) -> None:
    rows = fleet_json["fleet"]
    assert {r["replica"] for r in rows[:2]} == set(HOT)
    assert {r["replica"] for r in rows if r["hot"]} == set(HOT)
    for r in rows[:2]:
        assert r["p95_kv_usage"] >= 0.9 and r["max_waiting"] >= 10 and r["preemptions"] > 0
        assert r["usage_gap"] >= 0.5
    assert all(r["max_waiting"] == 0 for r in rows[2:])


def test_the_incident_names_the_imbalance(fleet_json: dict[str, Any]) -> None:
    v = fleet_json["verdict"]
    assert IncidentClass.REPLICA_IMBALANCE.value in v["classes"]
    kv303 = [f for f in fleet_json["findings"] if f["code"] == "KV303"]
    assert kv303 and kv303[0]["replica"] in HOT


def test_the_terminal_fleet_section_lists_the_hot_replicas(
    fleet_prometheus: PrometheusServer,
) -> None:
    _, text = _analyze(fleet_prometheus, "text")
    section = text.split("\nFLEET", 1)[1].split("\n\n", 1)[0].splitlines()
    assert f"{REPLICAS} replicas" in section[0]
    assert all(name in section[0] for name in HOT)
    hot_lines = [line for line in section[2:] if line.lstrip().startswith("!")]
    assert {line.split()[1] for line in hot_lines} == set(HOT)


def test_the_charts_keep_the_busiest_replicas(
    fleet_prometheus: PrometheusServer, fleet_json: dict[str, Any]
) -> None:
    charted = {s["replica"] for s in fleet_json["series"]}
    assert len(charted) == MAX_CHARTED_REPLICAS < REPLICAS
    assert set(HOT) <= charted
    _, html = _analyze(fleet_prometheus, "html")
    assert f"The charts show the {MAX_CHARTED_REPLICAS} busiest of the {REPLICAS} replicas" in html
