"""KV202: the level (or the queue) is held up by long prompts prefilled again and again."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.model.quantities.episodes import best_source, by_time
from kvdiag.analyzer.model.quantities.load_picture import (
    load_points,
    point_evidence,
    points_by_replica,
    usage_evidence,
    waiting_evidence,
)
from kvdiag.analyzer.model.quantities.vocabulary import Vocabulary, vocabulary
from kvdiag.analyzer.model.quantities.workload import Lengths, fmt_tokens, lengths, pct, pool
from kvdiag.analyzer.model.queries import col_max, first_max, prefix_hit_rate
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Evidence,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold


@dataclass(frozen=True, slots=True)
class _Caching:
    enabled: bool | None
    hit_rate: float | None
    evidence: Evidence | None
    words: Vocabulary

    def describe(self) -> str:
        if self.enabled is False:
            return f"{self.words.word('prefix_caching')} off"
        if self.hit_rate is not None:
            return f"{self.words.word('prefix_cache')} hit rate {self.hit_rate:.0%}"
        return f"{self.words.word('prefix_caching')} on, hit rate unknown"


class PrefillPeak(Rule):
    """Long prompts, prefilled per request with prefix caching off or missing, hold the level up.

    Fires when prompts dwarf what is generated (mean prompt at least `prompt_ratio` times
    the mean generated length and at least `long_prompt` tokens), prefix caching is off or
    its hit rate is under `low_hit`, and it shows: `min_waiting` or more requests queue, or KV
    usage reaches `usage_high`. Corroboration: usage stepping up by whole prompts at once.
    Remedies are priced in prompt tokens recomputed and held (domain.md §6: a 5,000-token
    system prompt for 20 users holds 100,000 tokens at once).
    """

    code = "KV202"
    name = "payload.prefill_peak"
    layer = 2
    severity = Severity.WARNING
    implies = IncidentClass.PREFILL_PEAK
    requires_any = ("metric_samples", "log_stats", "client_requests", "log_requests")
    thresholds = (
        Threshold(
            "prompt_ratio", 8, "x", "mean prompt tokens per generated token that is prompt-heavy"
        ),
        Threshold("long_prompt", 1024, "tokens", "mean prompt length that counts as long"),
        Threshold("low_hit", 0.30, "ratio", "a prefix cache hit rate under this does not help"),
        Threshold("usage_high", 0.80, "ratio", "KV usage held at or above this is a high level"),
        Threshold("min_waiting", 1, "requests", "waiting requests that count as a queue"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        replicas = points_by_replica(ctx)
        if not replicas:
            yield from self._replica(ctx, None, load_points(ctx))
        for name, part in replicas.items():
            yield from self._replica(ctx, name if len(replicas) > 1 else None, part)

    def _replica(
        self, ctx: RuleContext, scope: str | None, part: pl.DataFrame
    ) -> Iterator[Finding | Comparison | RuledOut]:
        lens = lengths(ctx, scope)
        if lens is None:
            return  # undecidable without request lengths
        caching = _caching(ctx, scope)
        yield from _comparisons(ctx, lens, caching, scope)
        ratio = lens.prompt / max(lens.generated, 1.0)
        if ratio < ctx.threshold("prompt_ratio") or lens.prompt < ctx.threshold("long_prompt"):
            yield ctx.rule_out(
                f"prompts average {fmt_tokens(lens.prompt)} tokens vs {fmt_tokens(lens.generated)} "
                "generated: not a prompt-heavy load"
            )
            return
        if caching.enabled is not False and (
            caching.hit_rate is None or caching.hit_rate >= ctx.threshold("low_hit")
        ):
            yield ctx.rule_out(
                f"long prompts, but {caching.describe()}: shared prefixes are computed once"
            )
            return
        impact = _impact(ctx, part)
        if impact is None:
            yield ctx.rule_out(
                "long prompts recomputed, but nothing queued and the level stayed low"
            )
            return
        text, evidence = impact
        title = (
            f"Long prompts recomputed per request with {caching.describe()}: prompts average "
            f"{fmt_tokens(lens.prompt)} tokens vs {fmt_tokens(lens.generated)} generated "
            f"({ratio:,.0f}:1), {fmt_tokens(lens.prompt * lens.requests)} prompt tokens for "
            f"{lens.requests} requests; {text}"
        )
        held = _held_text(ctx, part, lens, scope)
        if held:
            title += f"; {held}"
        ev = evidence + ([caching.evidence] if caching.evidence else [])
        ev += [e for e in (_step(ctx, part), _prefill_line(ctx, scope)) if e is not None]
        yield ctx.finding(title, ev, _remedies(ctx, lens, caching, scope), replica=scope)


def _caching(ctx: RuleContext, scope: str | None) -> _Caching:
    row = ctx.config("enable_prefix_caching", scope)
    enabled: bool | None = None
    ev = None
    if row is not None:
        enabled = str(row["value"]).lower() == "true"
        ev = ctx.evidence(row, "enable_prefix_caching", row["value"])
    else:
        where = "enable_prefix_caching IS NOT NULL" + (" AND replica = ?" if scope else "")
        eng = ctx.sql(
            f"SELECT * FROM log_engine WHERE {where} ORDER BY source_line LIMIT 1",
            [scope] if scope else [],
        )
        if eng.height:
            r = eng.row(0, named=True)
            enabled = str(r["enable_prefix_caching"]).lower() == "true"
            ev = ctx.evidence(r, "enable_prefix_caching", r["enable_prefix_caching"])
    hit = prefix_hit_rate(ctx, scope) if enabled is not False else None
    return _Caching(enabled, hit, ev, vocabulary(ctx, scope))


def _impact(ctx: RuleContext, part: pl.DataFrame) -> tuple[str, list[Evidence]] | None:
    if part.is_empty():
        return None
    waiting = first_max(part, "waiting")
    if waiting is not None and (waiting["waiting"] or 0) >= ctx.threshold("min_waiting"):
        queued = part.filter(pl.col("waiting") >= ctx.threshold("min_waiting"))
        top = col_max(queued, "usage")
        text = f"up to {int(waiting['waiting'])} waited with KV usage at most {pct(top)}"
        return text, [waiting_evidence(ctx, waiting)]
    peak = first_max(part, "usage")
    if peak is not None and peak["usage"] >= ctx.threshold("usage_high"):
        return f"KV usage held at {pct(peak['usage'])}", [usage_evidence(ctx, peak)]
    return None


def _held_text(ctx: RuleContext, part: pl.DataFrame, lens: Lengths, scope: str | None) -> str:
    size = pool(ctx, scope)
    running = int(col_max(part, "running"))
    if size is None or not running:
        return ""
    held = running * lens.prompt
    return (
        f"one prompt alone is {lens.prompt / size.usable:.0%} of the pool; at peak {running} "
        f"running requests held {fmt_tokens(held)} prompt tokens ({held / size.usable:.0%})"
    )


def _step(ctx: RuleContext, part: pl.DataFrame) -> Evidence | None:
    """The largest one-observation jump in usage: a prompt admitted in one step."""
    src = by_time(best_source(part))
    if src.height < 2:
        return None
    jumps = src.with_columns((pl.col("usage") - pl.col("usage").shift(1)).alias("step"))
    row = first_max(jumps.drop_nulls("step"), "step")
    if row is None or row["step"] <= 0:
        return None
    return point_evidence(ctx, row, "kv_usage_step_up", round(float(row["step"]), 4))


def _prefill_line(ctx: RuleContext, scope: str | None) -> Evidence | None:
    """The stats line with the most prompt throughput: the prefill work, as the engine saw it."""
    where = "prompt_tps IS NOT NULL" + (" AND replica = ?" if scope else "")
    rows = ctx.sql(
        f"SELECT * FROM log_stats WHERE {where} ORDER BY prompt_tps DESC, ts LIMIT 1",
        [scope] if scope else [],
    )
    if rows.is_empty() or not rows["prompt_tps"][0]:
        return None
    row = rows.row(0, named=True)
    return ctx.evidence(row, "prompt_tps", row["prompt_tps"])


def _remedies(
    ctx: RuleContext, lens: Lengths, caching: _Caching, scope: str | None
) -> list[Remedy]:
    total = lens.prompt * lens.requests
    saved = 1000 * max(lens.requests - 1, 0)
    out = []
    if caching.enabled is False:
        out.append(
            Remedy(
                caching.words.phrase("enable_prefix_caching"),
                f"every request prefilled its whole prompt: {lens.requests} x "
                f"{fmt_tokens(lens.prompt)} = {fmt_tokens(total)} prompt tokens for "
                f"{fmt_tokens(lens.generated * lens.requests)} generated; a prefix shared by "
                f"all {lens.requests} requests is computed once and held once: each 1,000 "
                f"shared tokens saves {fmt_tokens(saved)} tokens of prefill",
            )
        )
    else:
        out.append(
            Remedy(
                "make shared prefixes byte-identical and put them first",
                f"{caching.describe()}: per-request text (dates, ids) before the shared part "
                "defeats the cache",
            )
        )
    chunked = ctx.config("enable_chunked_prefill", scope)
    if chunked is not None and str(chunked["value"]).lower() == "false":
        out.append(
            Remedy(
                caching.words.phrase("chunked_prefill"),
                f"without it a {fmt_tokens(lens.prompt)}-token prompt is prefilled in one step, "
                "raising the level at once and stalling decodes",
            )
        )
    out.append(
        Remedy(
            "cap prompt length at the gateway",
            f"prompts are {lens.prompt / max(lens.generated, 1):,.0f}x longer than the answers",
        )
    )
    return out


def _comparisons(
    ctx: RuleContext, lens: Lengths, caching: _Caching, scope: str | None
) -> Iterator[Comparison]:
    tag = f" [{scope}]" if scope else ""
    yield ctx.compare(
        f"prompt tokens per generated token{tag}",
        ctx.threshold("prompt_ratio"),
        round(lens.prompt / max(lens.generated, 1.0), 1),
        "x",
        [caching.evidence],
        f"mean {fmt_tokens(lens.prompt)} prompt vs {fmt_tokens(lens.generated)} generated "
        f"({lens.source}); expected: the prompt-heavy threshold",
        threshold=True,
    )
    observed = (
        "off"
        if caching.enabled is False
        else (round(caching.hit_rate, 4) if caching.hit_rate is not None else "unknown")
    )
    residency = f"; {caching.words.phrase('cache_residency')}" if caching.enabled else ""
    yield ctx.compare(
        f"{caching.words.word('prefix_cache')} hit rate{tag}",
        ctx.threshold("low_hit"),
        observed,
        "ratio",
        [caching.evidence],
        f"expected: at least this where prompts share a prefix{residency}",
        threshold=True,
    )
