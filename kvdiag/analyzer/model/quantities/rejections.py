"""Requests the server turned away at admission (HTTP 429/503), and the cap that did it.

Three witnesses can see the same rejections: the server's access lines (one per request),
vLLM's `admission_rejections` counter (0.32+, one series per reason: which cap refused),
and a client's request log. They count the same requests, so the count is the largest
witness, never their sum. Only POSTs count: inference requests are POSTs, and a 503 on
`GET /health` is a server that is not up, not one that refuses work.

The caps that answer 503 by design: vLLM's `--max-num-queued-reqs` (requests in flight,
waiting or running) and `--max-num-queued-tokens` (prompt tokens still in prefill), both
0.31+ and enforced in the API server; SGLang's `--max-queued-requests` (waiting requests,
0.4.10.post2 on), whose setting reads as the same canonical key as vLLM's request cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.queries import of_replica
from kvdiag.domain.counters import counter_totals
from kvdiag.domain.records.diagnosis import Evidence

REJECTED_STATUSES = (429, 503)
# Canonical keys of the caps, in the order they are named; the counter's `reason` label
# is the cap's vLLM name, which is its canonical key.
QUEUE_CAPS = ("max_num_queued_reqs", "max_num_queued_tokens")

_ACCESS = (
    "SELECT * FROM log_http WHERE status IN (429, 503) AND method = 'POST' "
    "ORDER BY ts NULLS LAST, source_path, source_line"
)
# A client also sees the refusals that came inside a response already begun: vLLM checks
# admission again after a streamed response has started (HTTP 200) and sends the 503 as an
# error in the stream, which no access line shows.
_CLIENT = (
    "SELECT * FROM (SELECT *, CASE WHEN http_status IN (429, 503) THEN http_status ELSE "
    "TRY_CAST(regexp_extract(error, '\"code\":\\s*(\\d{3})', 1) AS INTEGER) END "
    "AS refused_status FROM client_requests) WHERE refused_status IN (429, 503) "
    "ORDER BY send_ts NULLS LAST, source_path, source_line"
)
_COUNTER = (
    # One series per reason and label set (the reason is spelled out so that series of
    # different reasons never interleave, even where the label set is not recorded).
    "SELECT replica, engine, coalesce(reason, '') || '|' || coalesce(series, '') AS series, "
    "reason, ts, value, sample_row FROM metric_samples "
    "WHERE metric = 'admission_rejections' AND suffix = 'total' "
    "ORDER BY replica, engine, series, ts NULLS FIRST, source_path, source_line"
)


@dataclass(frozen=True, slots=True)
class QueueCap:
    """A queue cap stated in the inputs: its canonical key, value and config row."""

    key: str
    value: int
    row: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Rejections:
    """What the witnesses say about rejected requests."""

    count: int
    witness: str  # "access lines" | "admission counter" | "client log" | "" (none)
    first: datetime | None
    last: datetime | None
    stamped: bool  # False: first and last are the stamped lines around unstamped ones
    # HTTP status -> requests: the access lines' statuses, else the client's
    statuses: Mapping[int, int]
    reasons: Mapping[str, int]  # the counter's reason label -> requests it refused
    evidence: tuple[Evidence, ...]

    def __bool__(self) -> bool:
        return self.count > 0


def rejections(ctx: Incident, replica: str | None = None) -> Rejections:
    """Rejected requests of one replica (all, when None), from the best witness."""
    access = of_replica(ctx, _ACCESS, replica) if ctx.has_rows("log_http") else None
    client = _client_rows(ctx, replica)
    reasons, counter_ev, steps = _counter(ctx, replica)
    counts = {
        "access lines": access.height if access is not None else 0,
        "admission counter": sum(reasons.values()),
        "client log": client.height,
    }
    witness = max(counts, key=lambda k: counts[k])  # ties keep the order above
    if not counts[witness]:
        return Rejections(0, "", None, None, True, {}, {}, ())
    timed = [
        (frame, col)
        for frame, col in ((access, "ts"), (client, "send_ts"), (steps, "ts"))
        if frame is not None and frame.height and frame[col].drop_nulls().len()
    ]
    first, last = _span(*timed[0]) if timed else (None, None)
    stamped = True
    if first is None and access is not None and access.height:
        first, last = _bracket(ctx, access)
        stamped = False
    lines = access if access is not None and access.height else client
    status_col = "status" if lines is access else "refused_status"
    statuses = {int(s): int(n) for s, n in lines.group_by(status_col).len().iter_rows()}
    evidence = _line_evidence(ctx, lines, status_col) + counter_ev
    return Rejections(
        counts[witness], witness, first, last, stamped, statuses, reasons, tuple(evidence)
    )


def rejecting_replicas(ctx: Incident, known: Mapping[str, Any]) -> list[str]:
    """Replicas with rejected requests that are not among `known`, in name order.

    The server's witnesses name the replica; the client log's rows stand in only when the
    server said nothing (a client log's folder need not be a server's).
    """
    server: set[str] = set()
    if ctx.has_rows("log_http"):
        server |= _replicas(of_replica(ctx, _ACCESS, None))
    if ctx.has_rows("metric_samples"):
        counted = of_replica(ctx, _COUNTER, None).filter(pl.col("value") > 0)
        server |= _replicas(counted)
    names = server or (set() if known else _replicas(_client_rows(ctx, None)))
    return sorted(n for n in names if n not in known)


def _replicas(frame: pl.DataFrame) -> set[str]:
    if frame.is_empty() or "replica" not in frame.columns:
        return set()
    return {str(r) for r in frame["replica"].drop_nulls().unique()}


def queue_caps(ctx: Incident, replica: str | None = None) -> list[QueueCap]:
    """The queue caps the config states (launch flags, config dumps), in QUEUE_CAPS order."""
    found = []
    for key in QUEUE_CAPS:
        row = ctx.config(key, replica)
        value = _as_int(row["value"]) if row is not None else None
        if row is not None and value is not None and row.get("origin") != "default":
            found.append(QueueCap(key, value, row))
    return found


def _as_int(text: Any) -> int | None:
    try:
        return int(float(str(text)))
    except ValueError:
        return None


def _client_rows(ctx: Incident, replica: str | None) -> pl.DataFrame:
    if not ctx.has_rows("client_requests"):
        return pl.DataFrame({"send_ts": [], "refused_status": []})
    return of_replica(ctx, _CLIENT, replica)


def _counter(
    ctx: Incident, replica: str | None
) -> tuple[dict[str, int], list[Evidence], pl.DataFrame | None]:
    """Per reason, the counter's increase over the window; its last sample as evidence;
    the samples at which it rose (their times bound the rejections)."""
    if not ctx.has_rows("metric_samples"):
        return {}, [], None
    samples = of_replica(ctx, _COUNTER, replica)
    if samples.is_empty():
        return {}, [], None
    totals = counter_totals(samples.drop("reason"), by=("replica", "series"))
    reason_of = dict(samples.select("series", "reason").unique().iter_rows())
    reasons: dict[str, int] = {}
    for series, increase in totals.select("series", "increase").iter_rows():
        if increase:
            name = str(reason_of.get(series) or "unlabelled")
            reasons[name] = reasons.get(name, 0) + int(increase)
    rising = samples.filter(pl.col("value") > pl.col("value").shift(1).over("series"))
    evidence = [
        ctx.evidence(row, f"admission_rejections_total{{{row['reason']}}}", row["value"])
        for row in samples.filter(pl.col("value") > 0)
        .sort("ts")
        .unique("series", keep="last", maintain_order=True)
        .to_dicts()
    ]
    return reasons, evidence, rising


def _bracket(ctx: Incident, access: pl.DataFrame) -> tuple[datetime | None, datetime | None]:
    """Uvicorn's access lines carry no time: the engine's stats lines around them (one every
    10 s while busy) bound it, the last before the first rejection and the first after the
    last one (same file)."""
    head, tail = access.row(0, named=True), access.row(access.height - 1, named=True)
    before = ctx.scalar(
        "SELECT max(ts) FROM log_stats WHERE source_path = ? AND source_line < ?",
        [head["source_path"], head["source_line"]],
    )
    after = ctx.scalar(
        "SELECT min(ts) FROM log_stats WHERE source_path = ? AND source_line > ?",
        [tail["source_path"], tail["source_line"]],
    )
    return before, after


def _span(frame: pl.DataFrame, column: str) -> tuple[datetime | None, datetime | None]:
    times = frame[column].drop_nulls()
    return times.min(), times.max()  # type: ignore[return-value]


def _line_evidence(ctx: Incident, lines: pl.DataFrame, status_col: str) -> list[Evidence]:
    """The first and the last rejected request's line."""
    if lines.is_empty():
        return []
    picked = [lines.row(0, named=True)]
    if lines.height > 1:
        picked.append(lines.row(lines.height - 1, named=True))
    out = []
    for row in picked:
        if "ts" not in row:
            row = {**row, "ts": row.get("send_ts")}
        out.append(ctx.evidence(row, "rejected_request", row[status_col]))
    return out
