"""429/503 rejections read as admission at work (KV302), on a real recorded vLLM run.

The oracle is the raw text: the POST access lines with 503 in server.log and the client's
own record of its 503s in requests.jsonl, counted here with a regex and json, not kvdiag.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.conftest import analyze_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUN = FIXTURES / "vllm-j-queue-cap-rejects" / "incident"
NO_CAP = FIXTURES / "vllm-j2-rejections-no-cap" / "incident"
FULL = FIXTURES / "vllm-j3-rejections-full-pool" / "incident"
_REJECTED = re.compile(r'^INFO:\s+\S+ - "POST \S+ HTTP/[\d.]+" (503|429) ')
_STAMP = re.compile(r"\b(\d\d-\d\d \d\d:\d\d:\d\d)\b")


def _rejected_lines(log: Path) -> list[int]:
    """Line numbers (1-based) of the POST access lines answered 503 or 429."""
    # Numbered as kvdiag and editors number them: a \r (progress bars) is not a line break.
    lines = log.read_bytes().decode().split("\n")
    return [i for i, line in enumerate(lines, 1) if _REJECTED.match(line)]


def _client_rejections(requests: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in requests.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("http_status") in (429, 503)]


def _finding(doc: dict[str, Any], code: str) -> dict[str, Any]:
    found = [f for f in doc["findings"] if f["code"] == code]
    assert len(found) == 1, [f["title"] for f in doc["findings"]]
    return found[0]


def _in_stream_rejections(requests: Path) -> list[dict[str, Any]]:
    """Requests answered 200 whose stream carried a 503 error: refused at vLLM's second
    admission check, after the response had begun."""
    rows = [json.loads(line) for line in requests.read_text().splitlines() if line.strip()]
    return [
        r for r in rows if r.get("http_status") == 200 and '"code": 503' in (r.get("error") or "")
    ]


def _counter_total(metrics: Path) -> float:
    """The last scrape's admission_rejections_total for the request cap."""
    last = sorted(metrics.glob("*.prom"))[-1].read_text()
    found = re.search(r'admission_rejections_total\{[^}]*max_num_queued_reqs"\} (\S+)', last)
    assert found is not None
    return float(found.group(1))


def test_the_recorded_run_shows_rejections_in_every_witness() -> None:
    # The recording itself, read without kvdiag: the access lines and the client agree on
    # the 503s, and the counter also holds the refusals sent inside a begun response.
    served = _rejected_lines(RUN / "server.log")
    assert len(served) >= 20
    assert len(_client_rejections(RUN / "requests.jsonl")) == len(served)
    in_stream = _in_stream_rejections(RUN / "requests.jsonl")
    assert _counter_total(RUN / "metrics") == len(served) + len(in_stream)


def test_queue_cap_rejections_are_admission_limited() -> None:
    served = _rejected_lines(RUN / "server.log")
    in_stream = _in_stream_rejections(RUN / "requests.jsonl")
    total = len(served) + len(in_stream)
    _, doc = analyze_json(RUN)
    assert doc["verdict"]["primary"] == "admission_limited", doc["verdict"]
    assert doc["verdict"]["confidence"] == "high", doc["verdict"]
    title = _finding(doc, "KV302")["title"]
    # One count, the largest witness's, not the sum of access lines, counter and client log.
    assert f"{total} requests were rejected from " in title
    assert f"{len(served)} with HTTP 503, the other {len(in_stream)} inside responses" in title
    assert f"--max-num-queued-reqs 8 (the admission counter gives it {total} rejections)" in title
    assert "had room (KV usage at most" in title
    when = re.search(r"from (\S+) to (\S+) ", title)
    assert when is not None, title
    sent = sorted(r["send_ts"] for r in _client_rejections(RUN / "requests.jsonl"))
    first, last = (_seconds(t) for t in when.groups())
    # The server log has 1-s resolution; the client's clock is the same machine's.
    assert abs(first - sent[0]) <= 1.5 and abs(last - sent[-1]) <= 1.5, (when.groups(), sent)


def test_the_access_log_alone_still_names_the_cap(tmp_path: Path) -> None:
    # No scrapes, no client log: the 503s, the non-default args line and the stats lines.
    shutil.copy(RUN / "server.log", tmp_path / "server.log")
    served = _rejected_lines(tmp_path / "server.log")
    _, doc = analyze_json(tmp_path)
    assert doc["verdict"]["primary"] == "admission_limited", doc["verdict"]
    finding = _finding(doc, "KV302")
    assert f"{len(served)} requests were rejected with HTTP 503 between " in finding["title"]
    assert "--max-num-queued-reqs 8 turned them away" in finding["title"]
    cited = {e["line"] for e in finding["evidence"] if e["path"] == "server.log"}
    assert served[0] in cited and served[-1] in cited
    # Access lines carry no time: the stats lines around them bound the client's send times.
    when = re.search(r"between (\S+) and (\S+) \(the stats lines around them\)", finding["title"])
    assert when is not None, finding["title"]
    sent = sorted(r["send_ts"] for r in _client_rejections(RUN / "requests.jsonl"))
    first, last = (_seconds(t) for t in when.groups())
    assert first - 1 <= sent[0] and sent[-1] <= last + 1, (when.groups(), sent)


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()


def test_rejections_without_a_cap_are_stated_not_claimed() -> None:
    served = _rejected_lines(NO_CAP / "server.log")
    assert served, "the near miss keeps the real 503 lines"
    _, doc = analyze_json(NO_CAP)
    assert doc["verdict"]["primary"] != "admission_limited", doc["verdict"]
    finding = _finding(doc, "KV302")
    assert finding["severity"] == "info"
    assert f"{len(served)} requests were rejected" in finding["title"]
    assert "no queue cap in the inputs" in finding["title"]


def test_rejections_in_front_of_a_full_pool_are_saturation() -> None:
    # The same cap refusing requests while the pool behind it is full: not admission_limited,
    # and the saturation finding counts the refused requests once (the counter's two reason
    # series are two series, and the access lines see the same requests).
    served = _rejected_lines(FULL / "server.log")
    in_stream = _in_stream_rejections(FULL / "requests.jsonl")
    assert served and _counter_total(FULL / "metrics") == len(served) + len(in_stream)
    _, doc = analyze_json(FULL)
    assert doc["verdict"]["primary"] == "saturation", doc["verdict"]
    assert "admission_limited" not in doc["verdict"]["classes"]
    ruled = {r["class"]: r["reason"] for r in doc["verdict"]["ruled_out"]}
    assert "full pool" in ruled["admission_limited"], ruled
    title = _finding(doc, "KV301")["title"]
    assert f", {len(served) + len(in_stream)} rejected" in title, title
