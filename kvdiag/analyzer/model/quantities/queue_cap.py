"""Rejections read as admission at work: which cap refused, and whether the pool had room.

KV302 calls it for the requests a server turned away (support/rejections.py). A rejection
is admission at work when a queue cap is in evidence (a launch flag or config dump stating
it, or vLLM's admission counter naming it as the reason) and the KV pool was not full
while the requests were refused. The pool's state is read from the load points around
the rejections (a stats line every 10 s, so the window is widened by that much); with no
point there it is unknown, and the reading says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import polars as pl

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.load_picture import usage_evidence
from kvdiag.analyzer.model.quantities.rejections import QUEUE_CAPS, QueueCap, Rejections, queue_caps
from kvdiag.analyzer.model.quantities.vocabulary import Vocabulary, vocabulary
from kvdiag.analyzer.model.quantities.workload import fmt_tokens, lengths, pct, pool
from kvdiag.analyzer.model.queries import col_max, col_median
from kvdiag.analyzer.model.reads import fmt_ts
from kvdiag.domain.records.diagnosis import Evidence, Remedy

# The engine's stats lines come every 10 s (vLLM) and only while busy: a point that far
# either side of the rejections still describes the pool they met.
WINDOW_PAD = timedelta(seconds=10)


@dataclass(frozen=True, slots=True)
class PoolDuring:
    """KV usage around the rejections: None when no load point covers them."""

    peak: float | None
    median: float | None
    evidence: tuple[Evidence, ...] = ()

    @property
    def known(self) -> bool:
        return self.median is not None


@dataclass
class CapReading:
    """What the rejections say about admission."""

    cap_named: bool  # a cap is in evidence: the rejections are admission at work
    text: str
    evidence: list[Evidence] = field(default_factory=list)
    remedies: list[Remedy] = field(default_factory=list)


def pool_during(ctx: Incident, points: pl.DataFrame | None, seen: Rejections) -> PoolDuring:
    """KV usage over the rejections' span (every point, when they carry no time)."""
    if points is None or points.is_empty():
        return PoolDuring(None, None)
    near = points.filter(pl.col("usage").is_not_null())
    if seen.first is not None and seen.last is not None:
        start, end = seen.first - WINDOW_PAD, seen.last + WINDOW_PAD
        near = near.filter(pl.col("ts").is_between(start, end))
    if near.is_empty():
        return PoolDuring(None, None)
    top = near.sort("usage", descending=True, maintain_order=True).row(0, named=True)
    evidence = (usage_evidence(ctx, top, "kv_cache_usage_during_rejections"),)
    return PoolDuring(col_max(near, "usage"), col_median(near, "usage"), evidence)


def read_caps(ctx: Incident, seen: Rejections, during: PoolDuring, scope: str | None) -> CapReading:
    """The rejections with the cap that refused them, in the engine's own words."""
    words = vocabulary(ctx, scope)
    caps = queue_caps(ctx, scope)
    refused = _refused(seen)
    room = _room(during)
    evidence = list(seen.evidence) + list(during.evidence)
    evidence += [ctx.evidence(c.row, c.key, c.value) for c in caps]
    named = _cap_phrase(words, caps, seen)
    if named is None:
        text = (
            f"{refused}, while the KV pool {room}; no queue cap in the inputs "
            f"({_engine_caps(words)}), "
            "and a proxy in front of the engine answers 503 as well: the limit is not named"
        )
        return CapReading(False, text, evidence)
    text = f"{refused}, while the KV pool {room}: {named} turned them away"
    return CapReading(True, text, evidence, _remedies(ctx, words, caps, during, scope))


def _refused(seen: Rejections) -> str:
    codes = sorted(seen.statuses.items())
    answered = sum(n for _, n in codes)
    how = " and ".join(f"{s} ({n})" if len(codes) > 1 else str(s) for s, n in codes)
    when = ""
    if seen.first is not None and seen.last is not None:
        when = f" from {fmt_ts(seen.first)} to {fmt_ts(seen.last)}"
        if not seen.stamped:
            around = "(the stats lines around them)"
            when = f" between {fmt_ts(seen.first)} and {fmt_ts(seen.last)} {around}"
    if answered >= seen.count:
        return f"{_were_rejected(seen.count)} with HTTP {how}{when}"
    if not answered:
        return f"{_were_rejected(seen.count)} ({seen.witness}){when}"
    return (
        f"{_were_rejected(seen.count)}{when} ({seen.witness}): {answered} with HTTP "
        f"{how}, the other {seen.count - answered} inside responses already begun "
        "(HTTP 200, the 503 sent in the stream)"
    )


def _room(during: PoolDuring) -> str:
    if not during.known:
        return "usage is unknown (no scrape or stats line around them)"
    assert during.peak is not None and during.median is not None
    return f"had room (KV usage at most {pct(during.peak)}, median {pct(during.median)})"


def _cap_phrase(words: Vocabulary, caps: list[QueueCap], seen: Rejections) -> str | None:
    """The cap(s) in evidence, with their values: `--max-num-queued-reqs 8`."""
    stated = {c.key: c.value for c in caps}
    keys = [k for k in seen.reasons if k in stated or k.startswith("max_num_queued")]
    keys += [k for k in stated if k not in keys]
    if not keys:
        return None
    parts = []
    for key in keys:
        value = stated.get(key)
        flag = _flag(words, key, value)
        counted = seen.reasons.get(key)
        notes = ["its value is not in the inputs"] if value is None else []
        notes += [f"the admission counter gives it {counted} rejections"] if counted else []
        parts.append(f"{flag} ({'; '.join(notes)})" if notes else flag)
    noun = "the queue cap" if len(parts) == 1 else "the queue caps"
    return f"{noun} {' and '.join(parts)}"


def _engine_caps(words: Vocabulary) -> str:
    """The queue caps the engine has, as its flags (TGI has no token cap)."""
    caps = []
    for key in QUEUE_CAPS:
        try:
            caps.append(words.flag(key))
        except KeyError:
            continue
    return ", ".join(caps)


def _flag(words: Vocabulary, key: str, value: int | None = None) -> str:
    try:
        return words.flag(key, value)
    except KeyError:  # an engine without that cap (SGLang has no token cap)
        return key if value is None else f"{key}={value}"


def _remedies(
    ctx: Incident,
    words: Vocabulary,
    caps: list[QueueCap],
    during: PoolDuring,
    scope: str | None,
) -> list[Remedy]:
    why = "the KV pool had room for more" if during.known else "the pool's usage is unknown"
    size, lens = pool(ctx, scope), lengths(ctx, scope)
    if size is not None and lens is not None:
        fit = size.fit(lens.peak)
        why = f"the pool holds {fit} requests of {fmt_tokens(lens.peak)} tokens"
    cap = caps[0] if caps else None
    raise_it = f"raise {_flag(words, cap.key)} above {cap.value}" if cap else "raise the queue cap"
    return [Remedy(f"{raise_it}, or add replicas", why)]


def _were_rejected(count: int) -> str:
    return "1 request was rejected" if count == 1 else f"{count} requests were rejected"
