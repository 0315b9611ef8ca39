"""The plan record: the incident's load replayed against its own configuration (checked
against what was observed) and against changed ones. Every output format of `kvdiag plan`
renders one `Plan`; `to_dict()` is the JSON contract (schema: plan.schema.json)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

PLAN_SCHEMA_VERSION = "1.0"

# The outcome quantities, in the order every format shows them: (key, label, unit).
QUANTITIES: tuple[tuple[str, str, str], ...] = (
    ("pool_tokens", "KV pool", "tokens"),
    ("max_concurrency", "requests of max_model_len the pool holds", "requests"),
    ("peak_kv_usage", "peak KV usage", "ratio"),
    ("max_waiting", "max waiting", "requests"),
    ("preemptions", "preemptions", "preemptions"),
    ("rejections", "rejections", "requests"),
    ("queue_time_p95_s", "queue time p95", "s"),
    ("ttft_p95_s", "TTFT p95", "s"),
    ("queue_drain_s", "longest stretch with requests waiting", "s"),
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a load did (observed) or would do (simulated) on one configuration."""

    pool_tokens: int | None
    max_concurrency: float | None
    peak_kv_usage: float | None
    max_waiting: int | None
    preemptions: int | None
    rejections: int | None
    queue_time_p95_s: float | None
    ttft_p95_s: float | None
    queue_drain_s: float | None = None  # the longest stretch with requests waiting

    def get(self, key: str) -> float | int | None:
        value: float | int | None = getattr(self, key)
        return value


@dataclass(frozen=True, slots=True)
class Scenario:
    """A configuration to try: the flags as given, what the simulator predicts, and the
    range the baseline's own error allows."""

    name: str  # "as given", or the remedy / grid point it comes from
    flags: dict[str, str]  # flag -> value, as the engine spells them
    predicted: Outcome
    range: dict[str, tuple[float, float]]  # quantity -> [low, high]
    clears_queue: bool  # nothing waits longer than a second at p95 and nothing is preempted
    note: str = ""


@dataclass(frozen=True, slots=True)
class LoadUsed:
    source: str  # "client request log" | "request counters and length histograms"
    requests: int
    seed: int | None
    closed_loop: bool
    scale: float  # --load-scale
    prefix_hit_rate: float


@dataclass(frozen=True, slots=True)
class StepFit:
    overhead_s: float
    per_prefill_token_s: float
    per_decode_token_s: float
    per_held_token_s: float
    windows: int
    source: str
    error: float | None  # relative RMS error over the windows it was fitted on


@dataclass(frozen=True, slots=True)
class KneeAt:
    """The load at which requests start to wait, and at which TTFT p95 doubles."""

    configuration: str  # "baseline" or a scenario's name
    unit: str  # "clients" | "x the incident's rate"
    waits_from: float | None
    ttft_doubles_at: float | None
    points: tuple[tuple[float, int, float | None], ...]  # (load, max waiting, TTFT p95)


@dataclass(frozen=True, slots=True)
class Plan:
    incident: str
    engine: str
    load: LoadUsed
    step: StepFit
    observed: Outcome
    simulated: Outcome
    validation: dict[str, float | None]  # quantity -> the baseline's error (see validate.py)
    trusted: bool  # every validated quantity within its bound
    scenarios: tuple[Scenario, ...]
    notes: tuple[str, ...]
    knee: tuple[KneeAt, ...] = ()  # with --knee: the baseline's, then each scenario's
    kvdiag_version: str = ""
    schema_version: str = PLAN_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
            if isinstance(value, dict):
                return {str(k): plain(v) for k, v in value.items()}
            if isinstance(value, tuple | list):
                return [plain(v) for v in value]
            if isinstance(value, float) and value != value:
                return None
            return value

        return {
            "schema_version": self.schema_version,
            "kvdiag_version": self.kvdiag_version,
            "incident": self.incident,
            "engine": self.engine,
            "load": plain(self.load),
            "step_model": plain(self.step),
            "baseline": {"observed": plain(self.observed), "simulated": plain(self.simulated)},
            "validation": plain(self.validation),
            "trusted": self.trusted,
            "scenarios": plain(self.scenarios),
            "knee": plain(self.knee),
            "notes": list(self.notes),
        }
