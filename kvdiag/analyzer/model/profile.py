"""What load a run carried, and what its users saw, read from its store.

Each quantity comes from the best evidence present: the client's request log (exact
arrivals, lengths and latencies), else the engine's counters and histograms, else its
stats lines; each says which. Histogram quantiles are interpolated inside buckets, so they
are as coarse as the buckets (vLLM's token buckets are 1,000 wide at the top).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kvdiag.analyzer.model.queries import counter_total, histogram_mean, histogram_quantile
from kvdiag.analyzer.model.reads import Reads

CLIENT = "client request log"
BUSY_WINDOW_S = 10.0  # the peak arrival rate is the busiest window of this length


@dataclass(frozen=True, slots=True)
class Measure:
    """A number and where it was read; None when the run holds no evidence of it."""

    value: float | None
    unit: str
    source: str = ""


NONE = Measure(None, "")


@dataclass(frozen=True, slots=True)
class Profile:
    """One run's load and the user-facing outcome, each measure with its source."""

    load: dict[str, Measure]
    outcome: dict[str, Measure]
    load_start: str | None  # ISO: the first request sent, else the first busy sample


def profile(reader: Reads) -> Profile:
    client = _client(reader)
    load = _client_load(reader, client) if client["n"] else _engine_load(reader)
    outcome = {**_latencies(reader, client), **_refusals(reader, client)}
    start = client["first"] if client["n"] else _first_busy(reader)
    return Profile(load, outcome, start.isoformat() if isinstance(start, datetime) else None)


def _client(reader: Reads) -> dict[str, Any]:
    return reader.sql(
        "SELECT count(*) AS n, min(send_ts) AS first, max(send_ts) AS last, "
        "max(end_ts) AS ended FROM client_requests WHERE send_ts IS NOT NULL"
    ).row(0, named=True)


def _span(first: Any, last: Any) -> float | None:
    if not isinstance(first, datetime) or not isinstance(last, datetime):
        return None
    return (last - first).total_seconds()


def _client_load(reader: Reads, client: dict[str, Any]) -> dict[str, Measure]:
    n = int(client["n"])
    arrivals = _span(client["first"], client["last"])
    lengths = reader.sql(
        "SELECT avg(prompt_tokens) AS pm, quantile_cont(prompt_tokens, 0.5) AS p50, "
        "quantile_cont(prompt_tokens, 0.95) AS p95, avg(completion_tokens) AS om, "
        "quantile_cont(completion_tokens, 0.5) AS o50, "
        "quantile_cont(completion_tokens, 0.95) AS o95 FROM client_requests"
    ).row(0, named=True)
    # The most requests sent within any BUSY_WINDOW_S from one send on (a burst shorter
    # than the window is its own span).
    busiest = reader.scalar(
        "SELECT max(c) FROM (SELECT count(*) OVER (ORDER BY send_ts RANGE BETWEEN CURRENT ROW "
        f"AND INTERVAL {int(BUSY_WINDOW_S)} SECONDS FOLLOWING) AS c FROM client_requests "
        "WHERE send_ts IS NOT NULL)"
    )
    window = min(BUSY_WINDOW_S, arrivals or BUSY_WINDOW_S) or BUSY_WINDOW_S
    in_flight = reader.scalar(
        "SELECT max(n) FROM (SELECT sum(d) OVER (ORDER BY t, d) AS n FROM ("
        "SELECT send_ts AS t, 1 AS d FROM client_requests WHERE send_ts IS NOT NULL "
        "UNION ALL SELECT end_ts, -1 FROM client_requests WHERE end_ts IS NOT NULL))"
    )
    return {
        "requests": Measure(n, "requests", CLIENT),
        "arrival_span": Measure(arrivals, "s", CLIENT),
        "arrival_rate": Measure(n / arrivals if arrivals else None, "requests/s", CLIENT),
        "peak_arrival_rate": Measure(
            busiest / window if busiest else None,
            "requests/s",
            f"{CLIENT}, busiest {BUSY_WINDOW_S:g} s",
        ),
        "prompt_tokens_mean": Measure(lengths["pm"], "tokens", CLIENT),
        "prompt_tokens_p50": Measure(lengths["p50"], "tokens", CLIENT),
        "prompt_tokens_p95": Measure(lengths["p95"], "tokens", CLIENT),
        "output_tokens_mean": Measure(lengths["om"], "tokens", CLIENT),
        "output_tokens_p50": Measure(lengths["o50"], "tokens", CLIENT),
        "output_tokens_p95": Measure(lengths["o95"], "tokens", CLIENT),
        "peak_concurrency": Measure(in_flight, "requests", f"{CLIENT}, requests in flight"),
    }


def _engine_load(reader: Reads) -> dict[str, Measure]:
    """The load from the engine's own counters and histograms, else its stats lines."""
    finished = counter_total(reader, "request_success")
    source = "request_success counter"
    if not finished:
        mean = histogram_mean(reader, "e2e_request_latency")
        finished, source = (mean[1], "e2e_request_latency histogram") if mean else (None, "")
    busy = _busy_span(reader)
    rate = finished / busy.value if finished and busy.value else None
    out = {
        "requests": Measure(finished, "requests", source),
        "arrival_span": busy,
        "arrival_rate": Measure(rate, "requests/s", f"{source} over the busy span" if rate else ""),
        "peak_concurrency": _peak_concurrency(reader),
    }
    for name, metric in (
        ("prompt", "request_prompt_tokens"),
        ("output", "request_generation_tokens"),
    ):
        out |= _histogram_lengths(reader, name, metric)
    return out


def _histogram_lengths(reader: Reads, name: str, metric: str) -> dict[str, Measure]:
    source = f"{metric} histogram"
    mean = histogram_mean(reader, metric)
    out = {f"{name}_tokens_mean": Measure(mean[0] if mean else None, "tokens", source)}
    for q in (0.5, 0.95):
        value = histogram_quantile(reader, metric, q) if mean else None
        out[f"{name}_tokens_p{round(q * 100)}"] = Measure(value, "tokens", f"{source} (buckets)")
    return out


# running + waiting per moment: scrapes summed over a replica's engines, else stats lines
_BUSY_POINTS = (
    "SELECT ts, sum(value) AS n FROM metric_samples WHERE suffix = '' AND metric IN "
    "('num_requests_running', 'num_requests_waiting') AND ts IS NOT NULL GROUP BY ts"
)
_BUSY_LINES = (
    "SELECT ts, coalesce(running, 0) + coalesce(waiting, 0) AS n FROM log_stats "
    "WHERE ts IS NOT NULL AND (running IS NOT NULL OR waiting IS NOT NULL)"
)


def _busy_source(reader: Reads) -> tuple[str, str]:
    if reader.scalar(f"SELECT count(*) FROM ({_BUSY_POINTS})"):
        return _BUSY_POINTS, "running + waiting scrapes"
    return _BUSY_LINES, "running + waiting in the stats lines"


def _busy_span(reader: Reads) -> Measure:
    query, source = _busy_source(reader)
    row = reader.sql(f"SELECT min(ts) AS a, max(ts) AS b FROM ({query}) WHERE n > 0").row(
        0, named=True
    )
    return Measure(_span(row["a"], row["b"]), "s", f"{source}, first to last busy")


def _first_busy(reader: Reads) -> Any:
    query, _ = _busy_source(reader)
    return reader.scalar(f"SELECT min(ts) FROM ({query}) WHERE n > 0")


def _peak_concurrency(reader: Reads) -> Measure:
    query, source = _busy_source(reader)
    return Measure(reader.scalar(f"SELECT max(n) FROM ({query})"), "requests", source)


def _latencies(reader: Reads, client: dict[str, Any]) -> dict[str, Measure]:
    out: dict[str, Measure] = {}
    for q in (0.5, 0.95, 0.99):
        pct = round(q * 100)
        out[f"queue_time_p{pct}"] = _histogram_measure(reader, "request_queue_time", q)
        out[f"ttft_p{pct}"] = (
            _client_quantile(reader, "ttft_s", q)
            if client["n"]
            else _histogram_measure(reader, "time_to_first_token", q)
        )
    out["e2e_p95"] = (
        _client_quantile(reader, "e2e_s", 0.95)
        if client["n"]
        else _histogram_measure(reader, "e2e_request_latency", 0.95)
    )
    return out


def _histogram_measure(reader: Reads, metric: str, q: float) -> Measure:
    value = histogram_quantile(reader, metric, q)
    return Measure(value, "s", f"{metric} histogram (buckets)" if value is not None else "")


def _client_quantile(reader: Reads, column: str, q: float) -> Measure:
    value = reader.scalar(f"SELECT quantile_cont({column}, ?) FROM client_requests", [q])
    return Measure(value, "s", CLIENT if value is not None else "")


def _refusals(reader: Reads, client: dict[str, Any]) -> dict[str, Measure]:
    """Requests turned away (HTTP 429/503) and requests that failed, from the largest
    witness: a rejection seen by the client, the server and a counter is one rejection."""
    witnesses = [
        (counter_total(reader, "admission_rejections"), "admission_rejections counter"),
        (
            reader.scalar("SELECT count(*) FROM log_http WHERE status IN (429, 503)"),
            "HTTP access lines (429, 503)",
        ),
    ]
    failed = None
    if client["n"]:
        witnesses.append(
            (
                reader.scalar(
                    "SELECT count(*) FROM client_requests WHERE http_status IN (429, 503)"
                ),
                CLIENT,
            )
        )
        failed = reader.scalar(
            "SELECT count(*) FROM client_requests WHERE coalesce(status, 'ok') <> 'ok'"
        )
    seen = [(v, s) for v, s in witnesses if v is not None]
    value, source = max(seen, key=lambda w: w[0]) if seen else (None, "")
    return {
        "rejections": Measure(value, "requests", source),
        "failed_requests": Measure(failed, "requests", CLIENT if failed is not None else ""),
    }
