"""Fetch an incident's metrics from a Prometheus-compatible server into a folder.

One file per exposed series name, `NN-<name>.json`: the server's query_range answer with the
query, the series name and the grid beside `status` and `data` (the Prometheus API JSON
ingester reads it and cites the query in every sample's raw text), written one sample pair
per line so that evidence points at the line holding its value. `manifest.json` lists
every query with its window, step, request count and size. Windows longer than the
server's point limit are fetched in consecutive chunks and merged per series.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvdiag import __version__
from kvdiag.analyzer.atomic import write_atomic
from kvdiag.analyzer.ingest.metrics.api_pairs import PairArray, compact_pairs
from kvdiag.analyzer.live.client import Auth, Matrix, PromClient
from kvdiag.analyzer.live.promql import (
    PLAN,
    POINT_LIMIT,
    Grid,
    Series,
    discovery_match,
    exposed_names,
    expression,
    steps_for,
)
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.domain.errors import LiveSourceError

MANIFEST = "manifest.json"
PARALLEL = 4  # queries in flight at once
SOURCE = "prometheus"  # the manifest's `source`, telling a fetched folder from a collected one


@dataclass(frozen=True, slots=True)
class LiveRequest:
    """Where to fetch from and which window, selector and resolution."""

    url: str
    since: float  # unix seconds
    until: float
    matchers: str = ""  # label matchers without braces, e.g. job="vllm"
    replica_label: str = "instance"
    step: float | None = None  # seconds; None = chosen from the window
    auth: Auth = field(default_factory=Auth)
    point_limit: int = POINT_LIMIT
    timeout_s: float = 120.0


@dataclass
class FetchResult:
    folder: Path
    queries: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0

    @property
    def samples(self) -> int:
        return sum(int(q["samples"]) for q in self.queries)

    @property
    def replicas(self) -> int:
        return len({r for q in self.queries for r in q["replicas"]})


ProgressFn = Callable[[int, int, str], None]


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def fetch(req: LiveRequest, out: Path, progress: ProgressFn | None = None) -> FetchResult:
    """Discover which wanted series exist, fetch each, write the folder and its manifest."""
    started = time.perf_counter()
    client = PromClient(req.url, req.auth, req.timeout_s)
    wanted = exposed_names(load_aliases())
    match = discovery_match(list(wanted), req.matchers)
    present = [wanted[n] for n in client.label_names(match, req.since, req.until) if n in wanted]
    if not present:
        raise LiveSourceError(
            f"{client.url}: no vLLM or SGLang series match {{{req.matchers}}} between "
            f"{iso(req.since)} and {iso(req.until)}; check --selector and the window"
        )
    order = {want.metric: i for i, want in enumerate(PLAN)}
    present.sort(key=lambda s: (order[s.want.metric], s.name))
    gauge_step, hist_step = steps_for(req.since, req.until, req.step)
    result = FetchResult(out)
    out.mkdir(parents=True, exist_ok=True)

    def one(i: int, series: Series) -> dict[str, Any]:
        step = hist_step if series.want.coarse else gauge_step
        return _fetch_one(client, req, series, step, out, i)

    # Queries in flight together: the server evaluates one while this side writes another.
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = [pool.submit(one, i, series) for i, series in enumerate(present, 1)]
        for i, (series, future) in enumerate(zip(present, futures, strict=True), 1):
            if progress is not None:
                progress(i, len(present), series.name)
            result.queries.append(future.result())
    result.requests = 1 + sum(int(q["requests"]) for q in result.queries)  # + discovery
    result.seconds = round(time.perf_counter() - started, 3)
    _write_manifest(req, client.url, result, gauge_step, hist_step)
    return result


def _fetch_one(
    client: PromClient, req: LiveRequest, series: Series, step: float, out: Path, index: int
) -> dict[str, Any]:
    grid = Grid.ending_at(req.since, req.until, step)
    query = expression(series, req.matchers, step, req.replica_label)
    chunks = grid.chunks(req.point_limit)
    merged = merge_results(client.query_range(query, c.start, c.end, c.step) for c in chunks)
    name = f"{index:02d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', series.name)}.json"
    header = {
        "query": query,
        "series_name": series.name,
        "start": grid.start,
        "end": grid.end,
        "step": step,
    }
    write_atomic(out / name, render_response(header, merged))
    return {
        "file": name,
        "name": series.name,
        "metric": series.want.metric,
        "how": series.want.how.value,
        "why": series.want.why,
        **header,
        "requests": len(chunks),
        "series": len(merged),
        "samples": sum(item.count for item in merged),
        "replicas": sorted({str(item.metric.get("instance", "")) for item in merged}),
    }


@dataclass
class MergedSeries:
    """One series (label set) over consecutive chunks: each chunk's pairs, as compact text
    (`[t,"v"],[t,"v"]`) where the server wrote them plainly, else as parsed pairs."""

    metric: dict[str, str]
    pieces: list[str | list[Any]] = field(default_factory=list)
    count: int = 0

    def add(self, values: PairArray | list[Any], text: str) -> None:
        if isinstance(values, PairArray):
            self.pieces.append(compact_pairs(text, values))
            self.count += values.count
        else:
            self.pieces.append(values)
            self.count += len(values)

    def lines(self) -> list[str]:
        """The pairs as `[t, "v"]`, one a line (the text kept as the server wrote it)."""
        texts = [piece for piece in self.pieces if isinstance(piece, str)]
        if len(texts) == len(self.pieces):
            text = ",".join(piece for piece in texts if piece)
            if not text:
                return []
            # Plain pairs hold no `],[` or `,"` but between and within pairs.
            return [text.replace("],[", "],\n[").replace(',"', ', "')]
        pairs: list[Any] = []
        for piece in self.pieces:
            pairs += json.loads(f"[{piece}]") if isinstance(piece, str) else piece
        return [",\n".join(f"[{_number(t)}, {_string(v)}]" for t, v in pairs)]


def merge_results(parts: Iterable[Matrix]) -> list[MergedSeries]:
    """Matrix results of consecutive chunks, joined per series (label set), sorted."""
    merged: dict[tuple[tuple[str, str], ...], MergedSeries] = {}
    for part in parts:
        for item in part.result:
            metric = item.get("metric", {}) if isinstance(item, dict) else None
            values = item.get("values", []) if isinstance(item, dict) else None
            if not isinstance(metric, dict) or not isinstance(values, PairArray | list):
                raise LiveSourceError(
                    f"the server answered a series that is not one: {item!r:.200}"
                )
            key = tuple(sorted((str(k), str(v)) for k, v in metric.items()))
            merged.setdefault(key, MergedSeries(dict(key))).add(values, part.text)
    return [merged[key] for key in sorted(merged)]


def render_response(header: dict[str, Any], result: list[MergedSeries]) -> bytes:
    """The API's JSON, one sample pair per line, with the query's header fields first."""
    head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in header.items())
    lines = [f'{{{head}, "status": "success", "data": {{"resultType": "matrix", "result": [']
    for i, item in enumerate(result):
        lines.append(f'{{"metric": {json.dumps(item.metric, sort_keys=True)}, "values": [')
        lines += item.lines()
        lines.append("]}" + ("," if i < len(result) - 1 else ""))
    lines.append("]}}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _number(t: Any) -> str:
    """A timestamp as json.dumps writes it (repr for floats and ints), without its overhead."""
    return repr(t) if type(t) in (int, float) and math.isfinite(t) else json.dumps(t)


def _string(v: Any) -> str:
    """A sample value ("0.5", "NaN", "+Inf") as a JSON string, quoted directly when it can be."""
    text = str(v)
    return f'"{text}"' if _PLAIN.fullmatch(text) else json.dumps(text)


_PLAIN = re.compile(r"[0-9A-Za-z.+-]*")


def _write_manifest(
    req: LiveRequest, url: str, result: FetchResult, gauge_step: float, hist_step: float
) -> None:
    manifest = {
        "source": SOURCE,
        "collected_by": f"kvdiag {__version__}",
        "url": url,
        "fetched_at": iso(time.time()),
        "since": iso(req.since),
        "until": iso(req.until),
        "selector": f"{{{req.matchers}}}",
        "replica_label": req.replica_label,
        "step_s": gauge_step,
        "histogram_step_s": hist_step,
        "auth": req.auth.kind,
        "requests": result.requests,
        "seconds": result.seconds,
        "queries": result.queries,
    }
    write_atomic(result.folder / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
