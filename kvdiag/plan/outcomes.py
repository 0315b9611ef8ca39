"""The outcome quantities of a run, as observed (the analysis's facts and the run's load
profile) and as simulated (a simulator result on a configuration)."""

from __future__ import annotations

from collections.abc import Mapping

from kvdiag.analyzer.model.profile import Profile
from kvdiag.domain.records.diagnosis import Fact
from kvdiag.domain.records.plan import Outcome
from kvdiag.plan.engine import Setup
from kvdiag.plan.sim import Result
from kvdiag.plan.validate import quantile


def _fact(facts: Mapping[str, Fact | tuple[Fact, ...]], name: str) -> float | int | None:
    found = facts.get(name)
    if isinstance(found, tuple):
        found = found[0] if found else None
    value = found.value if found is not None else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: float | int | None) -> int | None:
    return None if value is None else int(value)


def observed_outcome(
    facts: Mapping[str, Fact | tuple[Fact, ...]], seen: Profile, drain: float | None
) -> Outcome:
    def measured(name: str) -> float | None:
        m = seen.outcome.get(name)
        return None if m is None or m.value is None else round(float(m.value), 4)

    concurrency = _fact(facts, "max_concurrency")
    return Outcome(
        pool_tokens=_int(_fact(facts, "pool_tokens")),
        max_concurrency=None if concurrency is None else float(concurrency),
        peak_kv_usage=_fact(facts, "peak_kv_usage"),
        max_waiting=_int(_fact(facts, "max_requests_waiting")),
        preemptions=_int(_fact(facts, "preemptions")),
        rejections=_int(measured("rejections")),
        queue_time_p95_s=measured("queue_time_p95"),
        ttft_p95_s=measured("ttft_p95"),
        queue_drain_s=drain,
    )


def simulated_outcome(
    result: Result, setup: Setup, max_model_len: int | None, bounds: dict[str, list[float]]
) -> Outcome:
    """A simulated run's outcome; latencies through the engine's own histogram bounds when
    the observed ones came through them (`bounds`: "queue", "ttft")."""
    return Outcome(
        pool_tokens=setup.tokens,
        max_concurrency=round(setup.tokens / max_model_len, 2) if max_model_len else None,
        peak_kv_usage=round(result.peak_usage, 4),
        max_waiting=result.max_waiting,
        preemptions=result.preemptions,
        rejections=result.rejections,
        queue_time_p95_s=quantile(result.queue_times, 0.95, bounds.get("queue")),
        ttft_p95_s=quantile(result.ttfts, 0.95, bounds.get("ttft")),
        queue_drain_s=result.longest_queue_s,
    )
