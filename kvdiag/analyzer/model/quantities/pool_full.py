"""The engine's own word that the KV pool was full, and how long a full pool lasted.

vLLM and SGLang print a preemption or a retraction only when the KV pool cannot grow (v0:
`... is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache
space ... total_num_cumulative_preemption=N`; SGLang: `Decode out of memory happened.` or
`KV cache pool is full. Retract requests.`, with #retracted_reqs and #new_token_ratio), and
SGLang raises `RuntimeError: Decode out of memory` when a decode step cannot get its KV
slots at all. Each is the engine stating that the pool was full at that moment, so a paste
holding only these lines still says saturation. This module reads them per replica, phrases
their numbers for a finding's title, and measures the extent (`Extent`) of a full pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.load_picture import Preemptions, preemptions
from kvdiag.analyzer.model.quantities.vocabulary import Vocabulary
from kvdiag.analyzer.model.quantities.workload import fmt_tokens
from kvdiag.analyzer.model.queries import of_replica
from kvdiag.domain.records.diagnosis import Evidence, Extent

# A step that found no free KV slots at all: SGLang's decode or prefill allocation failure,
# vLLM's block pool or evictor with nothing left (`Cannot get 17 free blocks from the pool`).
_CRASHES = "event IN ('sglang_kv_alloc_failed', 'pool_exhausted')"
_FAILURES = (
    f"SELECT * FROM log_capacity_errors WHERE {_CRASHES} "
    "ORDER BY ts NULLS LAST, source_path, source_line"
)
_REPLICAS = (
    "SELECT DISTINCT replica FROM log_preemptions UNION "
    f"SELECT DISTINCT replica FROM log_capacity_errors WHERE {_CRASHES}"
)
_RATIOS_SHOWN = 3  # events whose #new_token_ratio a title quotes


@dataclass(frozen=True, slots=True)
class PoolFullStatements:
    """What one replica's engine printed about its pool being full."""

    pre: Preemptions
    failures: pl.DataFrame  # SGLang's KV allocation failures, their numbers folded in

    @property
    def said(self) -> bool:
        return bool(self.pre.count) or not self.failures.is_empty()

    @property
    def crashed(self) -> bool:
        """A decode or prefill step found no KV slots at all and raised."""
        return not self.failures.is_empty()

    def evidence(self, ctx: Incident) -> list[Evidence]:
        failed = [
            ctx.evidence(r, "kv_alloc_failed", r["requested_tokens"] or r["message"])
            for r in self.failures.head(2).to_dicts()
        ]
        return failed + list(self.pre.evidence)

    def extent(self) -> Extent:
        """Each event a moment; the engine's own running count of them, when it is higher."""
        times = [*self.failures["ts"], *event_times(self.pre)]
        return extent_of(times, max(len(times), self.pre.count))


def statements(ctx: Incident, replica: str | None = None) -> PoolFullStatements:
    """The replica's (or the whole folder's) preemptions, retractions and KV alloc failures."""
    return PoolFullStatements(preemptions(ctx, replica), of_replica(ctx, _FAILURES, replica))


def replicas_with_statements(ctx: Incident) -> list[str]:
    """Replicas whose logs hold a preemption, retraction or KV allocation failure."""
    if not (ctx.has_rows("log_preemptions") or ctx.has_rows("log_capacity_errors")):
        return []
    return sorted(str(r) for r in ctx.sql(_REPLICAS)["replica"].drop_nulls())


def extent_of(times: Iterable[datetime | None], observations: int) -> Extent:
    """The extent of `observations` moments, `times` those of them that were witnessed.

    The span is measured only between two or more witnessed times; a single line (even
    one carrying the engine's count of many events) measures none.
    """
    known = [t for t in times if t is not None]
    seconds = (max(known) - min(known)).total_seconds() if len(known) >= 2 else None
    return Extent(observations, seconds)


def points_extent(rows: pl.DataFrame, extra: Iterable[datetime | None] = ()) -> Extent:
    """The extent of load points (one source's stats intervals or scrapes) plus events."""
    times = [*rows["ts"], *extra]
    return extent_of(times, len(times))


def statement_phrase(said: PoolFullStatements, words: Vocabulary) -> str:
    """The engine's numbers, as it printed them: counts, ranks, token ratios, tokens asked."""
    parts = [_failure_phrase(said.failures)] if said.crashed else []
    if said.pre.count:
        parts.append(_preemption_phrase(said.pre, words))
    return "; ".join(parts)


def _preemption_phrase(pre: Preemptions, words: Vocabulary) -> str:
    events = pre.events
    if events is None:  # a counter or stats lines: their count is all they say
        return f"{words.count(pre.count)} ({pre.source})"
    cumulative = events["cumulative"].drop_nulls()
    if cumulative.len():
        modes = "/".join(sorted(str(m) for m in events["mode"].drop_nulls().unique()))
        lines = f", {events.height} warning lines" if events.height > 1 else ""
        return (
            f"{words.count(pre.count)} for lack of KV cache space "
            f"(total_num_cumulative_preemption={int(cumulative.max())}"  # type: ignore[arg-type]
            f"{f', {modes} mode' if modes else ''}{lines})"
        )
    text = (
        f"{words.count(pre.count)} in {events.height} events"
        if events.height > 1
        else f"{words.count(pre.count)} (#retracted_reqs: {pre.count})"
    )
    if len(pre.printed_by) > 1:
        text += f", printed by {_ranks(pre.printed_by)}"
    ratios = [
        f"{r['ratio_before']:.4f} -> {r['ratio_after']:.4f}"
        for r in events.head(_RATIOS_SHOWN).to_dicts()
        if r["ratio_before"] is not None and r["ratio_after"] is not None
    ]
    if ratios:
        more = ", ..." if events.height > _RATIOS_SHOWN else ""
        text += f", #new_token_ratio {', '.join(ratios)}{more}"
    gained = events["tokens_gained"].drop_nulls()
    if gained.len():
        text += f", {fmt_tokens(float(gained.sum()))} tokens freed"
    return text


def _failure_phrase(failures: pl.DataFrame) -> str:
    first = failures.row(0, named=True)
    times = f" ({failures.height} times)" if failures.height > 1 else ""
    text = f'"{first["message"]}"{times}'
    asked, left = first["requested_tokens"], first["available_tokens"]
    if asked is not None and left is not None:
        evictable = first["evictable_tokens"]
        text += (
            f" (the engine's numbers: {fmt_tokens(asked)} tokens asked, {fmt_tokens(left)} "
            f"available{'' if evictable is None else f', {fmt_tokens(evictable)} evictable'})"
        )
    return text


def _ranks(processes: tuple[str, ...]) -> str:
    """TP8-TP15 for a contiguous run of one kind of rank, else the names as printed."""
    kinds = {p.rstrip("0123456789") for p in processes}
    numbers = sorted(int(p[len(p.rstrip("0123456789")) :] or -1) for p in processes)
    if len(kinds) == 1 and numbers[0] >= 0 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        kind = kinds.pop()
        return f"{len(numbers)} ranks ({kind}{numbers[0]}-{kind}{numbers[-1]})"
    return ", ".join(processes)


def event_times(pre: Preemptions) -> list[datetime | None]:
    """When each event line printed (one per event), for an extent."""
    return [] if pre.events is None else list(pre.events["ts"])
