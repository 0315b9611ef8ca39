"""What to try when no flags are given, how to order the tries, and each prediction's range.

The tries: every remedy `analyze` proposed that is a flag kvdiag can apply, and a small
grid around the current settings (the pool twice and four times as large, half and twice
the sequence cap, twice the step budget). First those that clear the queue (queue time p95
under a second, nothing preempted or rejected), cheapest first: the least KV memory, then
the fewest sequences at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvdiag.analyzer.model.traffic import Traffic
from kvdiag.domain.errors import KvdiagError
from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.plan import Outcome, Scenario
from kvdiag.plan.engine import Setup, apply, parse_flags

CLEAR_QUEUE_S = 1.0
COARSE_WIDEN = 0.25  # a drawn load's predictions are this much less certain each way
_FLAGS = re.compile(r"(--[a-z][a-z0-9-]*)(?:[ =]([^\s;()]+))?")

Candidate = tuple[str, dict[str, str], dict[str, str]]  # name, canonical changes, as spelled


def candidates(d: Diagnosis, base: Setup, engine: str) -> list[Candidate]:
    out: list[Candidate] = []
    for f in d.findings:
        for r in f.remediation:
            spelled = _flags_of(r.action)
            try:
                words = tuple(w for k, v in spelled.items() for w in (k, v) if w)
                changes = parse_flags(words, engine)
                apply(base, changes)  # one the model cannot apply is not tried
            except KvdiagError:
                continue
            if changes:
                out.append((f"{f.code}: {r.action}", changes, spelled))
    out += _grid(base, engine)
    seen: set[tuple[tuple[str, str], ...]] = set()
    unique = []
    for name, changes, spelled in out:
        key = tuple(sorted(changes.items()))
        if key not in seen:
            seen.add(key)
            unique.append((name, changes, spelled))
    return unique


def _flags_of(action: str) -> dict[str, str]:
    return {m.group(1): m.group(2) or "" for m in _FLAGS.finditer(action) if m.group(2)}


def _grid(base: Setup, engine: str) -> list[Candidate]:
    words: list[tuple[str, str, str]] = []
    if base.pool_bytes is not None:
        for k in (2, 4):
            words.append((f"pool x{k}", "--kv-cache-memory-bytes", _size(base.pool_bytes * k)))
    words.append(("half the sequence cap", "--max-num-seqs", str(max(1, base.max_num_seqs // 2))))
    words.append(("twice the sequence cap", "--max-num-seqs", str(base.max_num_seqs * 2)))
    words.append(("twice the step budget", "--max-num-batched-tokens", str(base.budget * 2)))
    out: list[Candidate] = []
    for name, flag, value in words:
        try:
            changes = parse_flags((flag, value), engine)
            apply(base, changes)
        except KvdiagError:
            continue  # the engine has no such flag (SGLang spells them its own way)
        out.append((name, changes, {flag: value}))
    return out


def _size(n: float) -> str:
    """Bytes as a flag takes them: "34M" when a whole number of MiB, else the bytes."""
    mib = n / 2**20
    return f"{int(mib)}M" if mib == int(mib) else str(int(n))


def clears(p: Outcome) -> bool:
    return (p.queue_time_p95_s or 0.0) < CLEAR_QUEUE_S and not p.preemptions and not p.rejections


def ordered(scenarios: Iterable[Scenario]) -> list[Scenario]:
    """Those that clear the queue first, the least KV memory first; then the others, the
    shortest predicted queue time first (the closest to clearing it)."""

    def key(s: Scenario) -> tuple[bool, float, float, str]:
        pool = float(s.predicted.pool_tokens or 0)
        queue = s.predicted.queue_time_p95_s or 0.0
        return (not s.clears_queue, pool if s.clears_queue else queue, pool, s.name)

    return sorted(scenarios, key=key)


def ranges(
    p: Outcome, errs: dict[str, float | None], exact: bool
) -> dict[str, tuple[float, float]]:
    """Each predicted quantity widened by the baseline's own error (and by COARSE_WIDEN
    when the load was drawn, not read)."""
    widen = 0.0 if exact else COARSE_WIDEN
    out: dict[str, tuple[float, float]] = {}
    usage_err = errs.get("peak_kv_usage")
    if p.peak_kv_usage is not None:
        e = abs(usage_err or 0.0) + widen * p.peak_kv_usage
        out["peak_kv_usage"] = (
            round(max(0.0, p.peak_kv_usage - e), 4),
            round(min(1.0, p.peak_kv_usage + e), 4),
        )
    for key in ("max_waiting", "queue_time_p95_s", "ttft_p95_s"):
        value, ratio = p.get(key), errs.get(key)
        if value is None:
            continue
        r = ratio if ratio and ratio != float("inf") else 1.0
        low, high = sorted((float(value), float(value) / r))
        out[key] = (round(low * (1 - widen), 4), round(high * (1 + widen), 4))
    return out


def note(changes: dict[str, str], load: Traffic) -> str:
    if changes.get("enable_prefix_caching") == "True" and load.prefix_hit_rate == 0:
        return (
            "prefix caching was off in the incident, so no hit rate was observed: the "
            "prediction assumes none (an upper bound on the load it would see)"
        )
    return ""
