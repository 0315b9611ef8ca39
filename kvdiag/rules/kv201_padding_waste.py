"""KV201: the allocated slots carry far fewer tokens than the usage percentage suggests."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import polars as pl

from kvdiag.analyzer.diagnosis import Comparison, Finding, IncidentClass, Remedy, RuledOut, Severity
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.demand import slots
from kvdiag.rules.support.episodes import best_source
from kvdiag.rules.support.load_picture import points_by_replica, usage_evidence
from kvdiag.rules.support.queries import col_median
from kvdiag.rules.support.radix import evictable_added_back
from kvdiag.rules.support.vocabulary import vocabulary
from kvdiag.rules.support.workload import Lengths, Pool, fmt_tokens, lengths, pool


class PaddingWaste(Rule):
    """Payload well under half of what is allocated: padding or block rounding, not demand.

    At every observation with KV usage at or above `usage_min` and requests running,
    allocated slots = usage x usable pool tokens and effective tokens = running requests x
    their mean current length (prompt + half of what they generate: a request mid-decode).
    The median ratio over at least `min_points` observations under `payload_min` fires the
    rule. Block rounding alone is also priced: a sequence of n tokens holds
    ceil(n / block_size) blocks (a 1-token request holds 16 slots with 16-token blocks).
    Prefix sharing can push the ratio above 1 (one cached block serves many requests).
    """

    code = "KV201"
    name = "payload.padding_waste"
    layer = 2
    severity = Severity.WARNING
    implies = IncidentClass.PADDING_WASTE
    requires_any = ("metric_samples", "log_stats")
    thresholds = (
        Threshold("payload_min", 0.50, "ratio", "effective / allocated under this is waste"),
        Threshold("usage_min", 0.50, "ratio", "only observations at or above this usage count"),
        Threshold("min_points", 3, "observations", "observations the median needs"),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        replicas = points_by_replica(ctx)
        for name, part in replicas.items():
            scope = name if len(replicas) > 1 else None
            yield from self._replica(ctx, scope, best_source(part))

    def _replica(
        self, ctx: RuleContext, scope: str | None, part: pl.DataFrame
    ) -> Iterator[Finding | Comparison | RuledOut]:
        radix = evictable_added_back(ctx, scope)
        if radix is not None:
            yield radix
        lens, size = lengths(ctx, scope), pool(ctx, scope)
        if lens is None or size is None:
            return  # undecidable without request lengths and a pool size
        live = lens.prompt + lens.generated / 2
        yield from _comparisons(ctx, scope, lens, size, live)
        busy = part.filter(
            (pl.col("usage") >= ctx.threshold("usage_min")) & (pl.col("running") > 0)
        ).with_columns(
            (pl.col("running") * live / (pl.col("usage") * size.usable)).alias("payload")
        )
        if busy.height < ctx.threshold("min_points"):
            yield ctx.rule_out(
                f"KV usage seldom reached {ctx.threshold('usage_min'):.0%}: no high level for "
                "padding to inflate"
            )
            return
        ratio = col_median(busy, "payload")
        yield ctx.compare(
            "payload: effective tokens / allocated slots" + (f" [{scope}]" if scope else ""),
            1.0,
            round(ratio, 3),
            "ratio",
            [size.source],
            f"median over {busy.height} observations at {ctx.threshold('usage_min'):.0%}+ usage",
        )
        if ratio >= ctx.threshold("payload_min"):
            yield ctx.rule_out(
                f"the allocated slots carry {ratio:.0%} of their capacity in live tokens"
            )
            return
        row = busy.sort("payload").row(0, named=True)
        allocated = row["usage"] * size.usable
        title = (
            f"Allocated slots carry {ratio:.0%} live tokens: at {row['usage']:.0%} usage "
            f"({fmt_tokens(allocated)} slots) {int(row['running']):,} running requests of about "
            f"{fmt_tokens(live)} tokens hold {fmt_tokens(row['running'] * live)}"
        )
        ev = [usage_evidence(ctx, row)]
        lines = ctx.sql(
            "SELECT * FROM log_stats WHERE kv_usage_pct IS NOT NULL"
            + (" AND replica = ?" if scope else "")
            + " ORDER BY kv_usage_pct DESC, ts LIMIT 1",
            [scope] if scope else [],
        )
        if lines.height:  # the engine's own stats line saw the same level
            top = lines.row(0, named=True)
            ev.append(ctx.evidence(top, "kv_usage_pct", top["kv_usage_pct"]))
        yield ctx.finding(title, ev, _remedies(ctx, scope, size, live), replica=scope)


def _remedies(ctx: RuleContext, scope: str | None, size: Pool, live: float) -> list[Remedy]:
    out = [
        Remedy(
            "continuous batching with paged KV; bucket lengths (256 / 512 / 1k / 2k / 4k) "
            "where the engine pads",
            "slots padded to the longest sequence carry nothing: bucketing raised payload from "
            "about 20 % to 70 %+ in the worked example",
        )
    ]
    if size.block_size and size.block_size > 16:
        empty = slots(live, size.block_size) - live
        words = vocabulary(ctx, scope)
        blocks = words.word("blocks")
        out.append(
            Remedy(
                words.phrase("smaller_blocks"),
                f"with {size.block_size}-token {blocks} a {fmt_tokens(live)}-token sequence "
                f"leaves {fmt_tokens(empty)} slots empty; 16-token {blocks} leave at most 15",
            )
        )
    return out


def _comparisons(
    ctx: RuleContext, scope: str | None, lens: Lengths, size: Pool, live: float
) -> Iterator[Comparison]:
    tag = f" [{scope}]" if scope else ""
    if size.block_size:
        yield ctx.compare(
            f"empty slots per sequence (block rounding){tag}",
            0,
            round(slots(live, size.block_size) - live),
            "tokens",
            [size.source],
            f"a {fmt_tokens(live)}-token sequence in {size.block_size}-token "
            f"{vocabulary(ctx, scope).word('blocks')} (at most {size.block_size - 1} empty); "
            f"{lens.source}",
        )
