"""One plan, end to end: analyse, replay the baseline, validate it, predict each scenario."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvdiag import __version__
from kvdiag.analyzer.model.incident import Incident, kept_incident
from kvdiag.analyzer.model.profile import Profile
from kvdiag.analyzer.model.traffic import DEFAULT_SEED, Traffic
from kvdiag.domain.errors import NotPlannableError
from kvdiag.domain.records.diagnosis import Diagnosis, Fact
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.domain.records.plan import KneeAt, LoadUsed, Plan, Scenario, StepFit
from kvdiag.pipeline import analyze
from kvdiag.plan import sweep
from kvdiag.plan.engine import Setup, apply, baseline_setup, parse_flags
from kvdiag.plan.knee import find_knee
from kvdiag.plan.outcomes import observed_outcome, simulated_outcome
from kvdiag.plan.sim import Request, simulate
from kvdiag.plan.steptime import Fit, fit_step_model
from kvdiag.plan.validate import errors, within


@dataclasses.dataclass(frozen=True, slots=True)
class PlanOptions:
    flags: tuple[str, ...] = ()  # engine flags after `--`; empty: sweep the remedies
    load_scale: float = 1.0
    seed: int = DEFAULT_SEED
    knee: bool = False  # find the congestion knee of the baseline and each scenario


def plan_incident(incident: Path, analyze_opts: AnalyzeOptions, opts: PlanOptions) -> Plan:
    """Analyse, replay, validate, predict. Raises NoInputError (unreadable incident),
    NotPlannableError (no traffic to replay, no pool) or PlanFlagError (a flag the engine
    does not take, or the model does not use)."""
    with tempfile.TemporaryDirectory(prefix="kvdiag-plan-") as scratch:
        db = Path(scratch) / "incident.duckdb"
        diagnosis = analyze(dataclasses.replace(analyze_opts, incident=incident, db=db)).diagnosis
        with kept_incident(db, diagnosis.facts) as model:
            return _plan(model, diagnosis, opts)


def _plan(incident: Incident, diagnosis: Diagnosis, opts: PlanOptions) -> Plan:
    if diagnosis.fleet:
        raise NotPlannableError(
            f"a fleet of {len(diagnosis.fleet)} replicas: kvdiag plans one engine at a time "
            "(give one replica's folder)"
        )
    settings = {k: v.value for k, v in incident.stated_settings().items()}
    engine_name = _engine(diagnosis)
    base = baseline_setup(diagnosis.facts, settings)
    load = incident.traffic(opts.seed)
    if not load.requests:
        raise NotPlannableError("no traffic to replay: no request log and no request counters")
    fit = fit_step_model(incident.step_windows(base.tokens), base.budget)
    seen = incident.profile()
    bounds = _bounds(incident, seen)
    observed = observed_outcome(diagnosis.facts, seen, incident.observed_drain())
    requests = _scaled(load.requests, opts.load_scale)
    max_len = _max_model_len(diagnosis.facts)
    simulated = simulated_outcome(
        simulate(load.requests, base.engine(fit.model)), base, max_len, bounds
    )
    errs = errors(observed, simulated)
    trusted = all(within(observed, simulated).values())
    wanted = (
        [("as given", parse_flags(opts.flags, engine_name), _spelled(opts.flags))]
        if opts.flags
        else sweep.candidates(diagnosis, base, engine_name)
    )
    scenarios = [
        _scenario(name, changes, spelled, base, requests, fit, max_len, bounds, errs, load)
        for name, changes, spelled in wanted
    ]
    return Plan(
        incident=diagnosis.incident,
        engine=engine_name,
        load=LoadUsed(
            load.source,
            len(load.requests),
            load.seed,
            load.closed_loop,
            opts.load_scale,
            round(load.prefix_hit_rate, 4),
        ),
        step=_step(fit),
        observed=observed,
        simulated=simulated,
        validation=errs,
        trusted=trusted,
        scenarios=tuple(sweep.ordered(scenarios)),
        notes=tuple(_notes(load, fit, trusted, wanted, opts)),
        knee=_knees(load, base, fit, wanted) if opts.knee else (),
        kvdiag_version=__version__,
    )


def _engine(d: Diagnosis) -> str:
    fact = d.facts.get("engine")
    value = fact.value if isinstance(fact, Fact) else None
    return str(value) if value else "vllm"


def _max_model_len(facts: Mapping[str, Fact | tuple[Fact, ...]]) -> int | None:
    fact = facts.get("max_model_len")
    return fact.value if isinstance(fact, Fact) and isinstance(fact.value, int) else None


def _bounds(incident: Incident, seen: Profile) -> dict[str, list[float]]:
    """The engine's own bucket bounds of the latency histograms the observed p95s were read
    from, so that simulated ones are read the same way (like for like)."""
    out = {}
    for key, name, metric in (
        ("queue", "queue_time_p95", "request_queue_time"),
        ("ttft", "ttft_p95", "time_to_first_token"),
    ):
        measured = seen.outcome.get(name)
        if measured is None or "histogram" not in measured.source:
            continue
        edges = incident.histogram_edges(metric)
        if edges:
            out[key] = edges
    return out


def _scaled(requests: tuple[Request, ...], scale: float) -> tuple[Request, ...]:
    """Arrivals compressed `scale` times (the same lengths); a closed loop's gaps too."""
    if scale == 1.0:
        return requests
    return tuple(
        dataclasses.replace(r, arrival=r.arrival / scale, gap=r.gap / scale) for r in requests
    )


def _spelled(words: Sequence[str]) -> dict[str, str]:
    """The flags as the user wrote them: flag -> value ("" for a switch)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
            i += 1
        out[name] = value
        i += 1
    return out


def _scenario(
    name: str,
    changes: dict[str, str],
    spelled: dict[str, str],
    base: Setup,
    requests: tuple[Request, ...],
    fit: Fit,
    max_len: int | None,
    bounds: dict[str, list[float]],
    errs: dict[str, float | None],
    load: Traffic,
) -> Scenario:
    setup = apply(base, changes)
    if changes.get("enable_prefix_caching") == "False":
        requests = tuple(dataclasses.replace(r, cached=0) for r in requests)
    result = simulate(requests, setup.engine(fit.model))
    predicted = simulated_outcome(result, setup, max_len, bounds)
    return Scenario(
        name,
        spelled,
        predicted,
        sweep.ranges(predicted, errs, exact=load.exact),
        sweep.clears(predicted),
        sweep.note(changes, load),
    )


def _step(fit: Fit) -> StepFit:
    m = fit.model
    error = None if fit.error != fit.error else round(fit.error, 4)
    return StepFit(
        m.overhead,
        m.per_prefill_token,
        m.per_decode_token,
        m.per_held_token,
        fit.windows,
        fit.source,
        error,
    )


def _notes(
    load: Traffic,
    fit: Fit,
    trusted: bool,
    wanted: list[tuple[str, dict[str, str], dict[str, str]]],
    opts: PlanOptions,
) -> list[str]:
    notes = []
    if not load.exact:
        notes.append(
            f"the traffic is drawn from {load.source} (seed {load.seed}): arrivals spread over "
            "each scrape interval, lengths from the histogram buckets; ranges are widened"
        )
    if load.closed_loop:
        notes.append(
            "requests sent as others finished are replayed as a closed loop: a slower "
            "configuration slows the client too, as it would have"
        )
    if fit.windows == 0:
        notes.append(
            "no throughput in the evidence: a default step time is used, timings are rough"
        )
    if not trusted:
        notes.append(
            "the baseline misses what was observed beyond the bounds (see validation): "
            "read the predictions as directions, not numbers"
        )
    if opts.load_scale != 1.0:
        notes.append(f"the traffic is replayed {opts.load_scale:g}x as fast (the same lengths)")
    if not wanted:
        notes.append("no remedy or grid point to try")
    return notes


def _knees(
    load: Traffic,
    base: Setup,
    fit: Fit,
    wanted: list[tuple[str, dict[str, str], dict[str, str]]],
) -> tuple[KneeAt, ...]:
    configurations = [("baseline", base)] + [(n, apply(base, c)) for n, c, _ in wanted]
    out = []
    for name, setup in configurations:
        k = find_knee(load.requests, setup.engine(fit.model), load.closed_loop)
        points = tuple((p.load, p.max_waiting, p.ttft_p95_s) for p in k.points)
        out.append(KneeAt(name, k.unit, k.waits_from, k.ttft_doubles_at, points))
    return tuple(out)
