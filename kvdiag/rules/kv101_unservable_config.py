"""KV101: the pool cannot hold one request of max_model_len (or the engine refused to start)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from kvdiag.analyzer.model.quantities.peak import shrink_words
from kvdiag.analyzer.model.quantities.refusals import (
    NO_KV_ROOM,
    ONE_REQUEST_UNFIT,
    STATE_SLOTS_SHORT,
    advised_changes,
    first_sentence,
)
from kvdiag.analyzer.model.quantities.vocabulary import vocabulary
from kvdiag.analyzer.model.quantities.workload import fmt_tokens
from kvdiag.domain import dtypes, kvmath
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.domain.units import GIB
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.second_tier import second_tier

# Start-up refusals, by wording, for rows whose event name an ingester may spell its own way.
_NO_BLOCKS = (
    "%no available memory for the cache blocks%",
    "%not enough memory%mem-fraction-static%",
)


class UnservableConfig(Rule):
    """The KV pool cannot hold even one request of max_model_len; the engine refuses to start.

    Evidence, in order of strength: the engine's own refusal (`max seq len (N) is larger
    than ... KV cache (M)`, `To serve at least one request ... estimated maximum model length
    is L`, SGLang's `KV pool holds N tokens, fewer than --context-length L`), a pool with no
    room at all (`No available memory for the cache blocks` and every backend's equivalent,
    refusals/NO_KV_ROOM), a hybrid model's `max_num_seqs (N) exceeds available Mamba cache
    blocks (M)` (one Mamba block per running sequence: --max-num-seqs M or a larger pool;
    checked before NO_KV_ROOM), a request the whole pool could not hold at run time
    (refusals/ONE_REQUEST_UNFIT), else a start-up `Maximum concurrency for N tokens per
    request` under `min_concurrency`. The largest length that fits is the engine's estimate
    when printed, else the pool's tokens, else concurrency x max_model_len. Remedies: that
    max_model_len, or the pool growth (x, GiB) the configured one needs; for a pool with no
    room, the settings the engine's message names.
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
        yield from self._pool(ctx)
        yield from second_tier(ctx)  # a CPU tier beside the pool, where one is stated

    def _pool(self, ctx: RuleContext) -> Iterator[Finding | Comparison | RuledOut]:
        refusals = ctx.sql(
            "SELECT * FROM log_capacity_errors WHERE max_model_len IS NOT NULL "
            "AND (estimated_max_len IS NOT NULL OR pool_tokens IS NOT NULL "
            "OR needed_gib IS NOT NULL "
            "OR event IN ('max_len_exceeds_pool', 'needs_more_kv', 'tgi_max_total_unfit')) "
            "ORDER BY ts NULLS LAST, source_path, source_line"
        )
        if refusals.height:
            yield from self._refused(ctx, refusals)
            return
        slots = ctx.sql(
            "SELECT * FROM log_capacity_errors WHERE event IN ("
            + ", ".join("?" for _ in STATE_SLOTS_SHORT)
            + ") ORDER BY ts NULLS LAST, source_path, source_line",
            list(STATE_SLOTS_SHORT),
        )
        if slots.height:
            yield from _state_slots_short(ctx, slots.row(0, named=True))
            return
        no_blocks = ctx.sql(
            "SELECT * FROM log_capacity_errors WHERE event IN ("
            + ", ".join("?" for _ in NO_KV_ROOM)
            + ") OR "
            + " OR ".join("lower(coalesce(message, raw)) LIKE ?" for _ in _NO_BLOCKS)
            + " ORDER BY ts NULLS LAST, source_path, source_line",
            [*NO_KV_ROOM, *_NO_BLOCKS],
        )
        if no_blocks.height:
            yield _no_room(ctx, no_blocks.row(0, named=True))
            return
        unfit = ctx.sql(
            "SELECT * FROM log_capacity_errors WHERE event IN ("
            + ", ".join("?" for _ in ONE_REQUEST_UNFIT)
            + ") ORDER BY requested_tokens DESC NULLS LAST, ts NULLS LAST, source_line",
            list(ONE_REQUEST_UNFIT),
        )
        if unfit.height:
            yield from _request_unfit(ctx, unfit)
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
        length = vocabulary(ctx, row["replica"]).name("max_model_len")
        title = (
            f"The engine refused to start: one request of {length} {fmt_tokens(want)} needs "
            f"more KV than the pool holds{need}{fits}"
        )
        if row["event"] == "sglang_pool_below_context":
            # A warning, not a refusal: the engine runs and refuses or truncates long requests.
            title = (
                f"The pool holds {fmt_tokens(row['pool_tokens'])} tokens, fewer than the context "
                f"length {fmt_tokens(want)}: one full-length request cannot fit{fits}"
            )
        if row["event"] == "trtllm_window_reduced":
            # A warning, not a refusal: TensorRT-LLM cuts the window and max_seq_len and runs.
            length = vocabulary(ctx).name("max_model_len")
            title = (
                f"The engine cut {length} from {fmt_tokens(want)} to {fmt_tokens(fit or 0)}: "
                f"the pool holds fewer tokens than one request of {fmt_tokens(want)}; "
                "longer requests are refused"
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


def _no_room(ctx: RuleContext, row: dict[str, Any]) -> Finding:
    """A refusal because the pool has no room at all, in the engine's words and numbers."""
    words = vocabulary(ctx, row["replica"])
    said = first_sentence(row)
    numbers = []
    if row.get("requested_gib") is not None:
        numbers.append(f"{row['requested_gib']:g} GiB reserved")
    if row.get("available_gib") is not None:
        numbers.append(f"{row['available_gib']:g} GiB available")
    if row.get("utilization") is not None:
        numbers.append(f"{words.name('gpu_memory_utilization')} {row['utilization']:g}")
    stated = f" ({', '.join(numbers)})" if numbers else ""
    title = f"The engine refused to start: no memory was left for a single KV cache block{stated}"
    if not said.lower().startswith("no available memory for the cache blocks"):
        title += f": {said}"  # the backend's own account, with numbers of its own
    settings = advised_changes(row)
    remedies = [Remedy(", ".join(settings), f"the engine's own advice: {said}")]
    if not settings:
        remedies = [Remedy(words.phrase("no_kv_room"), words.phrase("no_kv_room_why"))]
    return ctx.finding(title, [ctx.evidence(row, "capacity_error", row["event"])], remedies)


def _state_slots_short(ctx: RuleContext, row: dict[str, Any]) -> Iterator[Finding | Comparison]:
    """max_num_seqs above the Mamba cache blocks: each running sequence of a hybrid model
    holds one, so the engine refuses to start rather than fail a full batch later."""
    words = vocabulary(ctx, row["replica"])
    asked, held = int(row["requested_slots"]), int(row["available_slots"])
    ev = [ctx.evidence(row, "available_slots", held)]
    seqs = words.name("max_num_seqs")
    yield ctx.compare(
        f"{seqs} vs the Mamba cache blocks",
        asked,
        held,
        "requests",
        ev,
        "one Mamba cache block per running sequence",
    )
    title = (
        f"The engine refused to start: {seqs} {asked:,} exceeds the {held:,} Mamba cache "
        "blocks the pool holds, and each running sequence of this hybrid model needs one"
    )
    remedies = [
        Remedy(
            words.flag("max_num_seqs", held),
            f"the most sequences the Mamba cache holds: {held:,} (the engine's own advice)",
        ),
        Remedy(
            words.phrase("grow_pool"),
            f"more KV memory means more blocks: {asked / held:.2f}x the pool serves {seqs} "
            f"{asked:,}",
        ),
    ]
    yield ctx.finding(title, ev, remedies)


def _request_unfit(ctx: RuleContext, rows: pl.DataFrame) -> Iterator[Finding | Comparison]:
    """Requests the engine gave up on at run time because the whole pool cannot hold one."""
    row = rows.row(0, named=True)
    pool = ctx.fact_value("pool_tokens")
    longest = row["requested_tokens"]
    ev = [ctx.evidence(r, "capacity_error", r["requested_tokens"]) for r in rows.head(3).to_dicts()]
    if longest is not None and isinstance(pool, int | float):
        yield ctx.compare(
            "longest refused request vs the pool", int(longest), int(pool), "tokens", ev, ""
        )
    size = f" (the longest {fmt_tokens(longest)} tokens)" if longest is not None else ""
    holds = f"; the pool holds {fmt_tokens(pool)} tokens" if isinstance(pool, int | float) else ""
    title = (
        f"{rows.height} request(s) could not run: one request alone needs more KV than the whole "
        f"pool holds{size}{holds}: {first_sentence(row)}"
    )
    fit = int(pool) if isinstance(pool, int | float) else None
    want = int(longest) if longest is not None else None
    remedies = _remedies(ctx, want, fit) if want and fit and want > fit else []
    words = vocabulary(ctx, row["replica"])
    remedies = remedies or [
        Remedy(words.phrase("grow_pool"), "so the longest request fits in the pool"),
        Remedy(
            f"lower {words.name('max_model_len')}",
            "so the engine refuses over-long requests at the door instead of failing them",
        ),
    ]
    yield ctx.finding(title, ev, remedies)


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
