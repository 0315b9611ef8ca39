"""What to ask a Prometheus-compatible server for, and at which resolution.

Only the canonical metrics that rules, facts or charts read are fetched (PLAN), and the
server aggregates them per replica before they travel:

- peak (load gauges: usage, waiting, running): `max by (replica, engine) (max_over_time(
  x[step]))`. When the step is finer than the scrape interval each step holds at most one
  sample and the result is the scraped samples themselves; when it is coarser, each step
  keeps its peak, which is what the rules judge (a full pool, a queue).
- last (counters; histogram `_bucket`, `_sum`, `_count`): `sum by (...) (last_over_time(
  x[step]))`, the cumulative value at the end of each step. Increases over the window (last
  minus first, resets counted) then equal the scraped folder's exactly, where `increase()`
  would extrapolate; rates at step resolution follow from it. Bucket counts come only for
  the histograms whose quantiles are read (queue time, TTFT), `_sum` and `_count` only for
  those whose means are read (request lengths): the rest never travels.
- labels (cache_config_info, GPU memory): `last_over_time(x[step])` with every label kept,
  since the labels are the data (pool blocks, block size, the GPU's identity).

Histograms and labels use a coarser step than the gauges (at most HIST_POINTS per window):
their rules read the window's first and last values, and the grid is aligned to the
window's end so that both are on it.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

from kvdiag.analyzer.schema.aliases import AliasTable

POINT_LIMIT = 11_000  # Prometheus refuses query_range with more points per series
POINTS = 1_500  # target points per gauge series over the window
HIST_POINTS = 240  # target points per histogram, info and GPU series
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
ENGINE_LABELS = ("engine", "tp_rank")  # vLLM's DP engine index, SGLang's rank
_INNER = re.compile(r"^\{(.*)\}$", re.S)


class How(enum.StrEnum):
    PEAK = "peak"
    LAST = "last"
    LABELS = "labels"


@dataclass(frozen=True, slots=True)
class Want:
    """One canonical metric to fetch: which exposed suffixes, how, at which resolution."""

    metric: str
    suffixes: tuple[str, ...]  # "" gauge/info, "total", "bucket", "sum", "count"
    how: How
    coarse: bool  # histogram / info resolution instead of the gauge step
    why: str


PLAN: tuple[Want, ...] = (
    Want("kv_cache_usage", ("",), How.PEAK, False, "KV usage: every layer-3 rule"),
    Want("num_requests_waiting", ("",), How.PEAK, False, "the queue: KV301, KV302, KV303"),
    Want("num_requests_running", ("",), How.PEAK, False, "concurrency: peak demand"),
    Want("num_requests_waiting_by_reason", ("",), How.PEAK, False, "deferred waits: KV302"),
    Want("num_requests_swapped", ("",), How.PEAK, False, "v0 swapping: KV301 pressure"),
    Want("prefix_cache_hit_rate", ("",), How.PEAK, True, "v0 prefix hit rate: KV202"),
    Want("num_preemptions", ("total",), How.LAST, False, "preemptions: KV301"),
    Want("admission_rejections", ("total",), How.LAST, False, "rejections: KV301 pressure"),
    Want("prefix_cache_queries", ("total",), How.LAST, False, "prefix hit rate: KV202"),
    Want("prefix_cache_hits", ("total",), How.LAST, False, "prefix hit rate: KV202"),
    Want("prompt_tokens", ("total",), How.LAST, False, "prompt throughput chart"),
    Want("generation_tokens", ("total",), How.LAST, False, "generation throughput chart"),
    Want("request_queue_time", ("bucket", "count"), How.LAST, True, "queue time p95/p99: KV301"),
    Want("time_to_first_token", ("bucket", "count"), How.LAST, True, "TTFT p95/p99: KV301"),
    Want("request_prompt_tokens", ("sum", "count"), How.LAST, True, "mean prompt: layers 2, 3"),
    Want("request_generation_tokens", ("sum", "count"), How.LAST, True, "mean output length"),
    Want("request_params_max_tokens", ("sum", "count"), How.LAST, True, "mean max_tokens"),
    Want("cache_config_info", ("",), How.LABELS, True, "pool blocks, block size, dtype"),
    *(
        Want(m, ("total",), How.LAST, False, "the KV offload tier's traffic and hits: KV203")
        for m in (
            "kv_offload_store_bytes",
            "kv_offload_load_bytes",
            "kv_offload_transfer_bytes",
            "external_prefix_cache_queries",
            "external_prefix_cache_hits",
        )
    ),
    Want("kv_offload_config_info", ("",), How.LABELS, True, "the CPU tier's size: KV203"),
    *(
        Want(m, ("total",), How.LAST, False, "LMCache's stores, lookups and hits: KV203")
        for m in (
            "lmcache_stored_tokens",
            "lmcache_lookup_tokens",
            "lmcache_lookup_hit_tokens",
            "lmcache_store_requests",
        )
    ),
    Want("lmcache_local_cache_usage", ("",), How.PEAK, False, "LMCache's CPU cache: layer 1"),
    Want("prompt_tokens_by_source", ("total",), How.LAST, False, "prompt tokens by source"),
    # SGLang states its pool and caps as gauges where vLLM has cache_config_info labels.
    Want("kv_pool_tokens", ("",), How.LABELS, True, "SGLang pool tokens: every layer"),
    Want("max_running_requests", ("",), How.LABELS, True, "SGLang request cap: KV302"),
    Want("context_len", ("",), How.LABELS, True, "SGLang context length: KV101"),
    *(
        Want(m, ("",), How.PEAK, False, "SGLang radix-cache tokens: layer 2")
        for m in ("kv_used_tokens", "kv_available_tokens", "kv_evictable_tokens")
    ),
    *(
        Want(m, ("",), How.LABELS, True, "GPU memory: layer 1")
        for m in ("gpu_fb_total", "gpu_fb_used", "gpu_fb_free", "gpu_fb_reserved")
    ),
)


@dataclass(frozen=True, slots=True)
class Series:
    """One exposed series name to fetch, and why."""

    name: str  # as exposed, e.g. vllm:time_to_first_token_seconds_bucket
    want: Want
    suffix: str


def selector_matchers(selector: str) -> str:
    """'{job="vllm"}' or 'job="vllm"' -> 'job="vllm"' (the matchers inside the braces)."""
    text = selector.strip()
    m = _INNER.match(text)
    inner = (m.group(1) if m else text).strip().rstrip(",")
    if "{" in inner or "}" in inner:
        raise ValueError(f"{selector!r}: expected label matchers such as '{{job=\"vllm\"}}'")
    return inner


def exposed_names(aliases: AliasTable) -> dict[str, Series]:
    """Every exposed name (with deployment prefixes) of every wanted suffix."""
    out: dict[str, Series] = {}
    for want in PLAN:
        for family in aliases.get(want.metric).names:
            for suffix in want.suffixes:
                name = family + (f"_{suffix}" if suffix else "")
                for variant in (name, *_prefixed(aliases, name)):
                    out[variant] = Series(variant, want, suffix)
    return out


def _prefixed(aliases: AliasTable, name: str) -> list[str]:
    return [old + name[len(new) :] for old, new in aliases.prefix_rewrites if name.startswith(new)]


def discovery_match(names: list[str], matchers: str) -> str:
    """A series selector matching any of `names` under the user's matchers."""
    alternatives = "|".join(re.escape(n) for n in sorted(names))
    return "{" + ", ".join(m for m in (f'__name__=~"{alternatives}"', matchers) if m) + "}"


def expression(series: Series, matchers: str, step_s: float, replica_label: str) -> str:
    """The PromQL for one series name over steps of `step_s` seconds."""
    want = series.want
    window = f"[{max(1, round(step_s * 1000) - 1)}ms]"  # one step, no sample counted twice
    selected = f"{series.name}{{{matchers}}}" if matchers else series.name
    if want.how is How.LABELS:
        return f"last_over_time({selected}{window})"
    by = [replica_label, *ENGINE_LABELS, "reason"]
    if series.suffix == "bucket":
        by.append("le")
    if want.how is How.PEAK:
        expr = f"max by ({', '.join(by)}) (max_over_time({selected}{window}))"
    else:
        expr = f"sum by ({', '.join(by)}) (last_over_time({selected}{window}))"
    if replica_label != "instance":  # the ingester names replicas by `instance`
        expr = f'label_replace({expr}, "instance", "$1", "{replica_label}", "(.+)")'
    return expr


def nice_step(seconds: float) -> float:
    """The first step in NICE_STEPS at or above `seconds` (whole days beyond)."""
    for step in NICE_STEPS:
        if step >= seconds:
            return float(step)
    return float(math.ceil(seconds / 86400) * 86400)


@dataclass(frozen=True, slots=True)
class Grid:
    """Evaluation times: `start`, `start + step`, ... `end`, aligned to the window's end."""

    start: float
    end: float
    step: float

    @classmethod
    def ending_at(cls, since: float, until: float, step: float) -> Grid:
        steps = max(0, math.ceil((until - since) / step - 1e-9))
        return cls(until - steps * step, until, step)

    @property
    def points(self) -> int:
        return round((self.end - self.start) / self.step) + 1

    def chunks(self, limit: int = POINT_LIMIT) -> list[Grid]:
        """Consecutive grids of at most `limit` points that together make this one."""
        out, first = [], 0
        while first < self.points:
            last = min(self.points, first + limit) - 1
            out.append(
                Grid(self.start + first * self.step, self.start + last * self.step, self.step)
            )
            first = last + 1
        return out


def steps_for(since: float, until: float, step: float | None) -> tuple[float, float]:
    """(gauge step, histogram step) in seconds for the window, or the step asked for."""
    if step:
        return step, step
    span = max(until - since, 1.0)
    gauge = nice_step(span / POINTS)
    return gauge, max(gauge, nice_step(span / HIST_POINTS))
