"""Client request logs: the real runs' requests.jsonl, row for row."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import fixture_cases
from tests.ingest_helpers import ingest, kind_of, write

LOGS = [c.incident / "requests.jsonl" for c in fixture_cases()]
LOGS = [p for p in LOGS if p.exists()]


@pytest.mark.parametrize("path", LOGS, ids=[p.parent.parent.name for p in LOGS])
def test_every_request_becomes_a_row_equal_to_its_json(path: Path) -> None:
    assert kind_of(path) == "client_requests"
    result = ingest(path)
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert result.account.lines_parsed == result.account.lines_total == len(raw)
    rows = result.table("client_requests").sort("source_line").to_dicts()
    assert len(rows) == len(raw)
    for row, obj in zip(rows, raw, strict=True):
        assert row["request_id"] == obj["req"] and row["phase"] == obj["phase"]
        sent = datetime.fromtimestamp(obj["send_ts"], tz=UTC).replace(tzinfo=None)
        assert abs((row["send_ts"] - sent).total_seconds()) < 1e-5
        assert (row["prompt_tokens"], row["max_tokens"], row["completion_tokens"]) == (
            obj["prompt_tokens"],
            obj["max_tokens"],
            obj["completion_tokens"],
        )
        assert (row["ttft_s"], row["e2e_s"], row["http_status"]) == (
            obj["ttft_s"],
            obj["e2e_s"],
            obj["http_status"],
        )
        assert (row["status"], row["finish_reason"]) == (obj["status"], obj["finish_reason"])


def test_failed_requests_and_garbage_lines(tmp_path: Path) -> None:
    text = (
        '{"req": "r1", "send_ts": 1795959301.5, "end_ts": 1795959361.5, "http_status": 503, '
        '"status": "http_error", "error": "Service Unavailable", "ttft_s": null}\n'
        "\n"
        "Traceback (most recent call last):\n"
        '{"unrelated": true}\n'
    )
    result = ingest(write(tmp_path, "client.jsonl", text), kind="client_requests")
    assert (result.account.lines_parsed, result.account.lines_unmatched) == (2, 2)
    (row,) = result.table("client_requests").to_dicts()
    assert (row["http_status"], row["status"], row["error"], row["ttft_s"]) == (
        503,
        "http_error",
        "Service Unavailable",
        None,
    )


def test_a_scrape_log_is_not_a_request_log(tmp_path: Path) -> None:
    line = '{"ts": 1795959236.911, "ts_done": 1795959236.913, "file": null, "http_status": 200}\n'
    assert kind_of(write(tmp_path, "scrapes.jsonl", line)) != "client_requests"
