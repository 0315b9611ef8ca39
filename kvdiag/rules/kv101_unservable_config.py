"""KV101: the pool cannot hold one request of max_model_len (or the engine refused to start)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from kvdiag.analyzer.diagnosis import (
    Comparison,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.domain import dtypes, kvmath
from kvdiag.domain.units import GIB
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.peak import shrink_words
from kvdiag.rules.support.vocabulary import vocabulary
from kvdiag.rules.support.workload import fmt_tokens

# Start-up refusals, by wording, for rows whose event name an ingester may spell its own way.
_NO_BLOCKS = (
    "%no available memory for the cache blocks%",
    "%not enough memory%mem-fraction-static%",
)


class UnservableConfig(Rule):
    """The KV pool cannot hold even one request of max_model_len; the engine refuses to start.

    Evidence, in order of strength: the engine's own refusal (`max seq len (N) is larger
    than ... KV cache (M)`, `To serve at least one request ... estimated maximum model length
    is L`, `No available memory for the cache blocks`), else a start-up `Maximum
    concurrency for N tokens per request` under `min_concurrency`. The largest length that
    fits is the engine's estimate when printed, else the pool's tokens, else concurrency x
    max_model_len. Remedies: that max_model_len, or the pool growth (x, GiB) the configured
    one needs.
    """

    code = "KV101"
    name = "pool.unservable_config"
    layer = 1
    severity = Severity.ERROR
    implies = IncidentClass.UNSERVABLE_CONFIG
    requires_any = ("log_capacity_errors", "log_kv_pool", "config")
    thresholds = (
        Threshold(
            "min_concurrency",
            1.0,
            "requests",
            "a pool holding fewer max-length requests is unservable",
        ),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        refusals = ctx.sql(
            "SELECT * FROM log_capacity_errors WHERE max_model_len IS NOT NULL "
            "AND (estimated_max_len IS NOT NULL OR pool_tokens IS NOT NULL "
            "OR needed_gib IS NOT NULL OR event IN ('max_len_exceeds_pool', 'needs_more_kv')) "
            "ORDER BY ts NULLS LAST, source_path, source_line"
        )
        if refusals.height:
            yield from self._refused(ctx, refusals)
            return
        no_blocks = ctx.sql(
            "SELECT * FROM log_capacity_errors WHERE event = 'no_cache_blocks' OR "
            + " OR ".join("lower(coalesce(message, raw)) LIKE ?" for _ in _NO_BLOCKS)
            + " ORDER BY ts NULLS LAST, source_path, source_line",
            list(_NO_BLOCKS),
        )
        if no_blocks.height:
            row = no_blocks.row(0, named=True)
            words = vocabulary(ctx, row["replica"])
            yield ctx.finding(
                "The engine refused to start: no memory was left for a single KV cache block",
                [ctx.evidence(row, "capacity_error", "no KV blocks")],
                [Remedy(words.phrase("no_kv_room"), words.phrase("no_kv_room_why"))],
            )
            return
        yield from self._concurrency(ctx)

    def _refused(self, ctx: RuleContext, rows: pl.DataFrame) -> Iterator[Finding | Comparison]:
        row = _best(rows)
        want = int(row["max_model_len"])
        fit, how = _largest_fit(row)
        ev = [ctx.evidence(r, "max_model_len", r["max_model_len"]) for r in rows.head(2).to_dicts()]
        fits = f"; the largest length that fits is {fmt_tokens(fit)} tokens ({how})" if fit else ""
        need = ""
        if row["needed_gib"] is not None and row["available_gib"] is not None:
            need = f" ({row['needed_gib']} GiB needed, {row['available_gib']} GiB available)"
        title = (
            f"The engine refused to start: one request of max_model_len {fmt_tokens(want)} needs "
            f"more KV than the pool holds{need}{fits}"
        )
        if fit:
            yield ctx.compare(
                "one request of max_model_len vs the pool",
                want,
                fit,
                "tokens",
                ev,
                f"largest length that fits: {how}",
            )
        yield ctx.finding(title, ev, _remedies(ctx, want, fit))

    def _concurrency(self, ctx: RuleContext) -> Iterator[Finding | Comparison | RuledOut]:
        # SGLang prints no concurrency: its start-up line gives the pool and context_len.
        rows = ctx.sql(
            "SELECT *, coalesce(concurrency, tokens / max_model_len) AS _conc FROM log_kv_pool "
            "WHERE max_model_len > 0 AND (concurrency IS NOT NULL OR tokens IS NOT NULL) "
            "ORDER BY _conc, source_path, source_line LIMIT 1"
        )
        if rows.height:
            row = rows.row(0, named=True)
            conc, want = float(row["_conc"]), int(row["max_model_len"])
        else:
            cfg = ctx.config("kv_cache_max_concurrency")
            mml = ctx.fact("max_model_len")
            if cfg is None or mml is None or not isinstance(mml.value, int | float):
                return
            row, conc, want = cfg, float(cfg["value"]), int(mml.value)
        ev = [ctx.evidence(row, "max_concurrency", conc)]
        length = vocabulary(ctx).name("max_model_len")
        tokens = ctx.fact("pool_tokens")
        stated = tokens.value if tokens is not None else None
        fit = int(stated) if isinstance(stated, int | float) else int(conc * want)
        yield ctx.compare(
            f"one request of {length} vs the pool",
            want,
            fit,
            "tokens",
            ev,
            f"maximum concurrency {conc:.2f}x at {fmt_tokens(want)} tokens",
        )
        if conc >= ctx.threshold("min_concurrency"):
            yield ctx.rule_out(f"the pool holds {conc:.2f} requests of {length} {fmt_tokens(want)}")
            return
        yield ctx.finding(
            f"The pool holds {conc:.2f} requests of {length} {fmt_tokens(want)}: a "
            "max-length request cannot run; the largest length that fits is about "
            f"{fmt_tokens(fit)}",
            ev,
            _remedies(ctx, want, fit),
        )


def _best(rows: pl.DataFrame) -> dict[str, Any]:
    """The row that states the most (the engine prints the same refusal more than once)."""
    scored = rows.with_columns(
        (
            pl.col("estimated_max_len").is_not_null().cast(pl.Int8) * 2
            + pl.col("pool_tokens").is_not_null().cast(pl.Int8)
        ).alias("_score")
    )
    return scored.sort("_score", descending=True, maintain_order=True).row(0, named=True)


def _largest_fit(row: dict[str, Any]) -> tuple[int | None, str]:
    if row["estimated_max_len"] is not None:
        return int(row["estimated_max_len"]), "the engine's estimate"
    if row["pool_tokens"] is not None:
        return int(row["pool_tokens"]), "the tokens the pool holds"
    if row["needed_gib"] and row["available_gib"] is not None:
        ratio = float(row["available_gib"]) / float(row["needed_gib"])
        return int(ratio * int(row["max_model_len"])), "about, from the GiB figures"
    return None, ""


def _remedies(ctx: RuleContext, want: int, fit: int | None) -> list[Remedy]:
    out: list[Remedy] = []
    words = vocabulary(ctx)
    if fit:
        out.append(
            Remedy(words.flag("max_model_len", fit), "the longest request this pool can hold")
        )
        grow = f"{want / fit:.1f}x what it holds now" if fit else ""
        per_token = ctx.fact_value("kv_bytes_per_token")
        need = kvmath.pool_bytes_for_tokens(want, float(per_token or 0)) / GIB
        size = f" (about {need:,.2f} GiB of KV)" if per_token else ""
        out.append(
            Remedy(
                words.phrase("grow_pool"),
                f"to serve {fmt_tokens(want)} tokens the pool must hold {grow}{size}",
            )
        )
        shrink = dtypes.fp8_shrink_factor(ctx.fact_value("kv_cache_dtype"))
        if shrink and shrink * fit >= want:
            out.append(
                Remedy(
                    words.phrase("fp8_kv"),
                    f"{shrink_words(shrink)} bytes per token: the same memory holds about "
                    f"{fmt_tokens(shrink * fit)} tokens, enough for {fmt_tokens(want)}",
                )
            )
    return out
