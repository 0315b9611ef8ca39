"""Two runs side by side: the load, the settings that changed, each layer's quantities and
the user-facing outcome, per unit of load when the loads differ."""

from __future__ import annotations

from kvdiag.analyzer.model.profile import Measure
from kvdiag.compare.quantities import (
    DECIDES_LOAD,
    LAYER_FACTS,
    LOAD,
    LOAD_TOLERANCE,
    OUTCOME,
    ROW_DIRECTION,
    Spec,
)
from kvdiag.compare.sides import RunEvidence
from kvdiag.domain.records.comparison import LayerChange, LoadComparison, Quantity, SettingChange
from kvdiag.domain.records.diagnosis import Diagnosis, Fact, LayerResult, Scalar

LAYER_TITLES = {1: "Pool vs card", 2: "Payload vs percentage", 3: "Peak demand vs pool"}


def ratio(before: Scalar, after: Scalar) -> float | None:
    if not _is_number(before) or not _is_number(after) or before <= 0 or after < 0:  # type: ignore[operator]
        return None
    return round(float(after) / float(before), 4)  # type: ignore[arg-type]


def _is_number(value: Scalar) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def better_side(spec: Spec, before: Scalar, after: Scalar) -> str | None:
    """ "after" or "before" when one is better beyond noise for the user, else None."""
    if spec.better is None or not _is_number(before) or not _is_number(after):
        return None
    a, b = float(before), float(after)  # type: ignore[arg-type]
    if abs(b - a) <= spec.noise_abs or abs(b - a) < spec.noise_rel * max(abs(a), abs(b)):
        return None
    lower_after = b < a
    return "after" if lower_after == (spec.better == "lower") else "before"


def _rounded(value: float | int | None) -> Scalar:
    if value is None or isinstance(value, int):
        return value
    return round(value, 4) if abs(value) < 100 else round(value, 1)


def _row(spec: Spec, before: Measure, after: Measure) -> Quantity:
    b, a = _rounded(before.value), _rounded(after.value)
    unit = before.unit or after.unit or None
    return Quantity(
        spec.label, b, a, unit, ratio(b, a), better_side(spec, b, a), before.source, after.source
    )


def compare_load(before: RunEvidence, after: RunEvidence) -> LoadComparison:
    """The load quantities side by side, whether they can be compared, and whether they
    are the same load within LOAD_TOLERANCE."""
    rows = tuple(
        _row(s, before.profile.load.get(s.name, _none()), after.profile.load.get(s.name, _none()))
        for s in LOAD
    )
    by_name = {s.name: r for s, r in zip(LOAD, rows, strict=True)}
    notes: list[str] = []
    idle = [_idle(before), _idle(after)]
    if idle[0] != idle[1]:
        which = "BEFORE" if idle[0] else "AFTER"
        notes.append(f"{which} carried no load: the two runs cannot be compared")
        return LoadComparison(False, False, LOAD_TOLERANCE, rows, tuple(notes))
    model_b, model_a = (r.settings.get("model") for r in (before, after))
    if model_b and model_a and model_b.value != model_a.value:
        notes.append(f"different models ({model_b.value} vs {model_a.value})")
        return LoadComparison(False, False, LOAD_TOLERANCE, rows, tuple(notes))
    if idle[0]:
        notes.append("neither run carried load: only the configuration and start-up compare")
        return LoadComparison(True, False, LOAD_TOLERANCE, rows, tuple(notes))
    off = _outside(by_name, notes)
    if off and set(off) <= {"requests", "arrival rate"} and _closed_loop(by_name):
        notes.append(
            "the same requests in flight at the peak, of the same lengths: a client that "
            "waits for each answer (a closed loop), whose pace follows the server's; "
            "the offered load is the same"
        )
        off = []
    flight = by_name["peak_concurrency"].change
    if not off and flight is not None and abs(flight - 1) > LOAD_TOLERANCE:
        notes.append(
            f"requests in flight at the peak: {flight:.2f}x BEFORE's; with the same arrivals "
            "that is the server's pace (answers sooner or later), not the load"
        )
    return LoadComparison(True, not off, LOAD_TOLERANCE, rows, tuple(notes))


def _none() -> Measure:
    return Measure(None, "")


def _idle(run: RunEvidence) -> bool:
    load = run.profile.load
    return not any((load.get(k) or _none()).value for k in ("requests", "peak_concurrency"))


def _outside(rows: dict[str, Quantity], notes: list[str]) -> list[str]:
    """The deciding load quantities that differ beyond the tolerance, each said in notes."""
    off = []
    for name in DECIDES_LOAD:
        row = rows[name]
        if row.change is None:
            continue
        if abs(row.change - 1) > LOAD_TOLERANCE:
            direction = "more" if row.change > 1 else "less"
            notes.append(f"{row.name}: AFTER had {row.change:.2f}x BEFORE's ({direction})")
            off.append(row.name)
    return off


def _closed_loop(rows: dict[str, Quantity]) -> bool:
    """As many requests in flight at the peak, and the same requests or the same span: a
    client that sends as it is answered (a fixed count takes longer on a slower server, a
    fixed duration gets through fewer). An open loop sending faster holds more in flight."""

    def same(name: str) -> bool:
        c = rows[name].change
        return c is not None and abs(c - 1) <= LOAD_TOLERANCE

    return same("peak_concurrency") and (same("requests") or same("arrival_span"))


def _fact_value(d: Diagnosis, name: str) -> Measure:
    found = d.facts.get(name)
    if isinstance(found, tuple):  # a fleet: the highest replica's
        numbered = [f for f in found if _is_number(f.value)]
        found = max(numbered, key=lambda f: float(f.value)) if numbered else None  # type: ignore[arg-type]
    if not isinstance(found, Fact) or not _is_number(found.value):
        return _none()
    return Measure(found.value, found.unit or "", str(found.source or found.note or ""))  # type: ignore[arg-type]


def _outcome_measure(run: RunEvidence, name: str) -> Measure:
    return run.profile.outcome.get(name) or _fact_value(run.diagnosis, name)


def compare_outcomes(
    before: RunEvidence, after: RunEvidence, same_load: bool
) -> tuple[Quantity, ...]:
    """The user-facing numbers; counts per N requests arrived when the loads differ."""
    n_b, n_a = ((r.profile.load.get("requests") or _none()).value for r in (before, after))
    rows = []
    for spec in OUTCOME:
        b, a = _outcome_measure(before, spec.name), _outcome_measure(after, spec.name)
        if not same_load and spec.per_requests and n_b and n_a:
            b, a = _per(b, n_b, spec.per_requests), _per(a, n_a, spec.per_requests)
            spec = Spec(
                spec.name,
                f"{spec.label} per {spec.per_requests:,} requests",
                spec.better,
                spec.noise_abs * spec.per_requests / max(n_b, n_a),
                spec.noise_rel,
            )
        rows.append(_row(spec, b, a))
    return tuple(rows)


def _per(m: Measure, requests: float | None, per: int) -> Measure:
    if m.value is None or not requests:
        return m
    return Measure(m.value / requests * per, f"per {per:,} requests", m.source)


def compare_layers(before: Diagnosis, after: Diagnosis) -> tuple[LayerChange, ...]:
    """Each reconciliation layer of both runs, its quantities matched by name."""
    out = []
    for layer, title in LAYER_TITLES.items():
        b, a = _layer(before, layer), _layer(after, layer)
        facts = tuple(
            _row(s, _fact_value(before, s.name), _fact_value(after, s.name))
            for s in LAYER_FACTS.get(layer, ())
        )
        out.append(
            LayerChange(
                layer,
                title,
                b.status if b else "not_checked",
                a.status if a else "not_checked",
                b.conclusion if b else "",
                a.conclusion if a else "",
                tuple(q for q in facts if q.before is not None or q.after is not None)
                + _matched_rows(b, a),
            )
        )
    return tuple(out)


def _layer(d: Diagnosis, layer: int) -> LayerResult | None:
    return next((r for r in d.reconciliation if r.layer == layer), None)


def _matched_rows(before: LayerResult | None, after: LayerResult | None) -> tuple[Quantity, ...]:
    rows_b = {c.quantity: c for c in (before.comparisons if before else ())}
    rows_a = {c.quantity: c for c in (after.comparisons if after else ())}
    names = list(rows_b) + [n for n in rows_a if n not in rows_b]
    out = []
    for name in names:
        b, a = rows_b.get(name), rows_a.get(name)
        spec = Spec(name, name, ROW_DIRECTION.get(name), 0, 0.1)
        vb, va = (b.observed if b else None), (a.observed if a else None)
        unit = (b or a).unit if (b or a) else None  # type: ignore[union-attr]
        src = [", ".join(str(s) for s in c.sources) if c else "" for c in (b, a)]
        out.append(Quantity(name, vb, va, unit, ratio(vb, va), better_side(spec, vb, va), *src))
    return tuple(out)


def setting_changes(before: RunEvidence, after: RunEvidence) -> tuple[SettingChange, ...]:
    """Every setting whose value differs (stated on one side only counts as differing)."""
    out = []
    for key in sorted(set(before.settings) | set(after.settings)):
        b, a = before.settings.get(key), after.settings.get(key)
        if b is not None and a is not None and _same(b.value, a.value):
            continue
        out.append(
            SettingChange(
                key,
                b.value if b else None,
                a.value if a else None,
                b.source if b else "not stated",
                a.source if a else "not stated",
                (b or a).flag if (b or a) else None,  # type: ignore[union-attr]
            )
        )
    return tuple(out)


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b
