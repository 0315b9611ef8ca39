"""The quantities a comparison lines up, and which direction is better for the user.

Data, not judgement: each names where its number is read, its unit, whether lower or
higher is better (None: no direction is better, e.g. the arrival rate), and what counts as
noise: a difference at or under `noise_abs`, or under `noise_rel` of the larger value, is
no difference. Thresholds are for one recorded run against another on the same machine:
timings of requests that did not queue wander by tens of percent between runs.
"""

from __future__ import annotations

from dataclasses import dataclass

LOWER = "lower"
HIGHER = "higher"


@dataclass(frozen=True, slots=True)
class Spec:
    name: str  # key in the run's profile, or a fact's name
    label: str
    better: str | None
    noise_abs: float = 0.0
    noise_rel: float = 0.2
    # When the loads differ, judged per this many requests arrived (None: it is already a
    # per-request number, such as a latency percentile).
    per_requests: int | None = None


# Was it the same load? `decides`: the quantities that must agree within the tolerance.
LOAD_TOLERANCE = 0.15
LOAD: tuple[Spec, ...] = (
    Spec("requests", "requests", None),
    Spec("arrival_span", "arrival span", None),
    Spec("arrival_rate", "arrival rate", None),
    Spec("peak_arrival_rate", "peak arrival rate", None),
    Spec("prompt_tokens_mean", "prompt tokens, mean", None),
    Spec("prompt_tokens_p50", "prompt tokens, p50", None),
    Spec("prompt_tokens_p95", "prompt tokens, p95", None),
    Spec("output_tokens_mean", "output tokens, mean", None),
    Spec("output_tokens_p50", "output tokens, p50", None),
    Spec("output_tokens_p95", "output tokens, p95", None),
    Spec("peak_concurrency", "requests in flight, peak", None),
)
DECIDES_LOAD = ("requests", "arrival_rate", "prompt_tokens_mean", "output_tokens_mean")

# What the users saw: the outcome, per unit of load when the loads differ.
OUTCOME: tuple[Spec, ...] = (
    Spec("max_requests_waiting", "max waiting", LOWER, 1, per_requests=100),
    Spec("preemptions", "preemptions", LOWER, 1, per_requests=1000),
    Spec("rejections", "rejections (HTTP 429/503)", LOWER, 0, per_requests=1000),
    Spec("failed_requests", "failed requests", LOWER, 0, per_requests=1000),
    Spec("queue_time_p50", "queue time p50", LOWER, 0.25),
    Spec("queue_time_p95", "queue time p95", LOWER, 0.25),
    Spec("queue_time_p99", "queue time p99", LOWER, 0.25),
    Spec("ttft_p50", "TTFT p50", LOWER, 0.25),
    Spec("ttft_p95", "TTFT p95", LOWER, 0.25),
    Spec("ttft_p99", "TTFT p99", LOWER, 0.25),
    Spec("e2e_p95", "end-to-end latency p95", LOWER, 0.5),
    Spec("peak_kv_usage", "peak KV usage", None),
    Spec("max_requests_running", "max running", None),
)

# Layer quantities (facts and the reconciliation's rows, by their `quantity` text).
LAYER_FACTS: dict[int, tuple[Spec, ...]] = {
    1: (
        Spec("pool_tokens", "KV pool", HIGHER, 0, 0.01),
        Spec("pool_blocks", "KV pool blocks", None),  # more, smaller blocks hold no more
        Spec("pool_bytes", "KV pool bytes", HIGHER, 0, 0.01),
        Spec("max_concurrency", "requests of max_model_len the pool holds", HIGHER, 0, 0.01),
    ),
}
ROW_DIRECTION: dict[str, str] = {
    "max waiting requests": LOWER,
    "preemptions": LOWER,
    "retractions": LOWER,
    "queue time p95": LOWER,
    "queue time p99": LOWER,
    "TTFT p95": LOWER,
    "TTFT p99": LOWER,
    "payload: effective tokens / allocated slots": HIGHER,
    "empty slots per sequence (block rounding)": LOWER,
    "prefix cache hit rate": HIGHER,
}

# The settings that bear on each class: a change among them is what explains its going.
EXPLAINS: dict[str, tuple[str, ...]] = {
    "saturation": (
        "kv_cache_memory_bytes",
        "gpu_memory_utilization",
        "num_gpu_blocks",
        "kv_cache_dtype",
        "max_model_len",
        "tensor_parallel_size",
        "max_num_seqs",
        "block_size",
    ),
    "admission_limited": (
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_num_queued_reqs",
        "max_num_queued_tokens",
        "max_running_requests",
        "max_queued_requests",
    ),
    "prefill_peak": ("enable_prefix_caching", "max_num_batched_tokens", "enable_chunked_prefill"),
    "padding_waste": ("block_size", "kv_cache_memory_bytes"),
    "unservable_config": (
        "max_model_len",
        "kv_cache_memory_bytes",
        "gpu_memory_utilization",
        "block_size",
        "kv_cache_dtype",
        "tensor_parallel_size",
    ),
    "memory_overcommit": ("gpu_memory_utilization", "kv_cache_memory_bytes", "max_num_seqs"),
    "gpu_imbalance": ("tensor_parallel_size", "pipeline_parallel_size"),
    "replica_imbalance": ("data_parallel_size",),
}
EXPLAINS["shrunken_pool"] = EXPLAINS["saturation"]
