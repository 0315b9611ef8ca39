"""Client-side request logs: one JSON object per line, one line per request.

The real runs' load generator writes `requests.jsonl` with send_ts / first_token_ts / end_ts
(Unix seconds), prompt_tokens, max_tokens, completion_tokens, http_status, status,
finish_reason, ttft_s, e2e_s, phase and req. Other generators' spellings of the same fields
are listed in `_FIELDS`. Blank lines are parsed; a line that is not a JSON object, or an
object with no request field, is unmatched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvdiag.analyzer.ingest.base import Emit, IngestContext, Ingester, InputUnit, TableBatch, Tally
from kvdiag.analyzer.ingest.metrics.scrape_time import MS_THRESHOLD
from kvdiag.analyzer.ingest.rows import as_float, as_int, clean_raw, frame_for, templates
from kvdiag.analyzer.text.lines import ReadStats, iter_line_batches
from kvdiag.domain.records.diagnosis import InputProblem

# client_requests column -> JSON keys that carry it, first found wins
_FIELDS: dict[str, tuple[str, ...]] = {
    "request_id": ("req", "request_id", "id"),
    "phase": ("phase", "tag"),
    "send_ts": ("send_ts", "start_ts", "sent_at"),
    "first_token_ts": ("first_token_ts",),
    "end_ts": ("end_ts", "finished_at"),
    "prompt_tokens": ("prompt_tokens", "input_tokens", "prompt_len"),
    "max_tokens": ("max_tokens",),
    "completion_tokens": ("completion_tokens", "output_tokens", "output_len"),
    "ttft_s": ("ttft_s", "ttft"),
    "e2e_s": ("e2e_s", "latency_s", "latency"),
    "http_status": ("http_status", "status_code"),
    "status": ("status",),
    "finish_reason": ("finish_reason",),
    "error": ("error",),
}
_TIMES = ("send_ts", "first_token_ts", "end_ts")
_INTS = ("prompt_tokens", "max_tokens", "completion_tokens", "http_status")
_FLOATS = ("ttft_s", "e2e_s")
# A request log, not a scrape log: at least two of these keys on the first object.
_SNIFF_KEYS = ("send_ts", "first_token_ts", "ttft_s", "e2e_s", "completion_tokens", "end_ts")
_OBJECT_LINE = re.compile(r"^\s*\{.*\}\s*$")


def _when(value: Any) -> datetime | None:
    """Unix seconds (milliseconds from 1e11 on, as scrape_time reads them) or ISO-8601."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) / (1000 if abs(value) >= MS_THRESHOLD else 1)
        try:
            return datetime.fromtimestamp(seconds, tz=UTC).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):  # NaN, or outside the years 1-9999
            return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
        except (OverflowError, ValueError):
            return None
    return None


def request_row(obj: dict[str, Any], unreadable: set[str] | None = None) -> dict[str, Any] | None:
    """client_requests columns of one request object, or None when it names no request field.

    Columns whose value is there but cannot be read (a time that is no time, a count that is
    no number) are left empty and named in `unreadable`.
    """
    row: dict[str, Any] = {}
    for column, keys in _FIELDS.items():
        row[column] = next((obj[k] for k in keys if obj.get(k) is not None), None)
    if all(row[c] is None for c in _TIMES + _INTS):
        return None
    given = {c for c, v in row.items() if v is not None}
    for column in _TIMES:
        row[column] = _when(row[column])
    for column in _INTS:
        row[column] = as_int(row[column])
    for column in _FLOATS:
        row[column] = as_float(row[column])
    for column in ("request_id", "phase", "status", "finish_reason", "error"):
        row[column] = None if row[column] is None else str(row[column])
    if unreadable is not None:
        unreadable |= {c for c in given if row[c] is None}
    return row


class ClientRequestsIngester(Ingester):
    """Reads a client-side request log (JSON Lines) into `client_requests`."""

    kind = "client_requests"
    description = "client request log, JSON Lines (send/first-token/end times, tokens, status)"
    tables = ("client_requests",)

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        first = next((ln for ln in head.splitlines() if ln.strip()), "")
        if not _OBJECT_LINE.match(first):
            return 0
        hits = sum(f'"{k}"' in first for k in _SNIFF_KEYS)
        return 85 if hits >= 2 else 0

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        for path, rel in zip(unit.files, unit.rels, strict=True):
            yield from self._one(path, rel, unit.replica)

    def _one(self, path: Path, rel: str, replica: str) -> Iterator[Emit]:
        stats = ReadStats()
        tally = Tally()
        rows = []
        unmatched: list[tuple[int, str]] = []
        unreadable: set[str] = set()
        for batch in iter_line_batches(path, stats):
            for line_no, text in batch.iter_rows():
                tally.total += 1
                row = self._line(text, unreadable)
                if row is None and "\ufffd" in text:
                    tally.undecodable += 1  # invalid bytes: no telling what it said
                elif row is None:
                    tally.unmatched += 1
                    unmatched.append((line_no, text))
                elif row:
                    row.update(source_path=rel, source_line=line_no, raw=clean_raw(text))
                    rows.append({**row, "replica": replica})
                    tally.parsed += 1
                else:
                    tally.parsed += 1  # blank line
        if stats.truncated:
            yield InputProblem(rel, tally.total or None, stats.truncated)
        if unreadable:
            tally.notes.append(f"unreadable values left empty: {', '.join(sorted(unreadable))}")
        if rows:
            tally.records = len(rows)
            yield TableBatch("client_requests", frame_for("client_requests", rows))
        yield tally.account(rel, templates(unmatched))

    @staticmethod
    def _line(text: str, unreadable: set[str]) -> dict[str, Any] | None:
        """The row of one line; {} for a blank line; None when it is not a request."""
        if not text.strip():
            return {}
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
            return None
        return request_row(obj, unreadable) if isinstance(obj, dict) else None
