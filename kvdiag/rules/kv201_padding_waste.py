"""KV201: the allocated slots carry far fewer tokens than the usage percentage suggests."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from kvdiag.analyzer.model.quantities.demand import slots
from kvdiag.analyzer.model.quantities.episodes import best_source
from kvdiag.analyzer.model.quantities.hybrid import HybridBlocks, hybrid_blocks
from kvdiag.analyzer.model.quantities.load_picture import points_by_replica, usage_evidence
from kvdiag.analyzer.model.quantities.spread import Range, Spread, payload_range
from kvdiag.analyzer.model.quantities.vocabulary import vocabulary
from kvdiag.analyzer.model.quantities.workload import (
    Lengths,
    Pool,
    fmt_tokens,
    lengths,
    pool,
    spread,
)
from kvdiag.analyzer.model.queries import prefix_hit_rate
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold
from kvdiag.rules.support.radix import evictable_added_back


class PaddingWaste(Rule):
    """Payload well under half of what is allocated: padding or block rounding, not demand.

    At every observation with KV usage at or above `usage_min` and requests running,
    allocated slots = usage x usable pool tokens, and the live tokens of the running
    requests lie between the fewest and the most the evidence allows (support/spread.py:
    the running count times the shortest and longest lengths a request log, histogram
    buckets or max_model_len leave open, narrowed by the pool's own bounds). The medians of
    both ends over at least `min_points` observations make the payload range. Padding is
    claimed only when the whole range is under `payload_min`; a range that straddles it is
    an info finding that says so. Block rounding alone is also priced: a sequence of n
    tokens holds ceil(n / block_size) blocks (a 1-token request holds 16 slots with
    16-token blocks). Shared prefix blocks can push the ratio above 1. A vLLM hybrid model's
    block is the engine's choice (one attention page holds a Mamba state page): the finding
    cites those start-up lines with both page sizes, and --block-size is not offered.
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
        size = pool(ctx, scope)
        if size is None:
            return  # undecidable without a pool size
        lens, spread_ = lengths(ctx, scope), spread(ctx, scope)
        if lens is not None:
            yield from _comparisons(ctx, scope, lens, size, lens.prompt + lens.generated / 2)
        busy = (pl.col("usage") >= ctx.threshold("usage_min")) & (pl.col("running") > 0)
        if part.select(busy.sum()).item() < ctx.threshold("min_points"):
            yield ctx.rule_out(
                f"KV usage seldom reached {ctx.threshold('usage_min'):.0%}: no high level for "
                "padding to inflate"
            )
            return
        observed = _Observed(part, busy, size, spread_, _shares_prefixes(ctx, scope))
        typical = lens.prompt + lens.generated / 2 if lens is not None else spread_.longest
        yield _payload_comparison(ctx, scope, size, observed)
        line = ctx.threshold("payload_min")
        if observed.bounds.at_or_over(line):
            yield ctx.rule_out(
                f"the allocated slots carry at least {_floor_pct(observed.bounds.low)} of their "
                "capacity in live tokens"
            )
            return
        if observed.bounds.straddles(line) and spread_.source == "no request lengths":
            return  # without any length the range says nothing a reader could act on
        yield self._finding(ctx, scope, size, observed, typical)

    def _finding(
        self, ctx: RuleContext, scope: str | None, size: Pool, observed: _Observed, typical: float
    ) -> Finding:
        line = ctx.threshold("payload_min")
        row, worst = observed.most_padded()
        allocated = row["usage"] * size.usable
        running = int(row["running"])
        held = observed.spread.high(running)
        claimed = observed.bounds.under(line)
        title = (
            f"Allocated slots carry {_range_text(observed.bounds)} live tokens: at "
            f"{row['usage']:.0%} usage ({fmt_tokens(allocated)} slots) {running:,} running "
            f"requests of at most {fmt_tokens(observed.spread.longest)} tokens hold at most "
            f"{fmt_tokens(min(held, worst.high * allocated))} ({observed.spread.source})"
        )
        if not claimed:
            title = (
                f"Padding undecided: {title}; the bounds straddle {line:.0%}, so the evidence "
                "neither shows nor rules out padding"
            )
        hybrid = hybrid_blocks(ctx, scope)
        if hybrid is not None:  # the block is the engine's choice, not the operator's
            title += (
                f"; vLLM raised the attention block to {fmt_tokens(hybrid.block_size)} tokens "
                f"itself for this hybrid model ({hybrid.pages()})"
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
        if hybrid is not None:
            ev += hybrid.evidence(ctx)
        remedies = _remedies(ctx, scope, size, typical, hybrid) if claimed else []
        severity = None if claimed else Severity.INFO
        return ctx.finding(title, ev, remedies, severity=severity, replica=scope, claimed=claimed)


class _Observed:
    """The payload range of every busy observation of `points`, and their medians.

    An observation's range depends on its usage and running count alone, so each distinct
    pair is judged once and counted: a dict and a range per stats line held ~250 MB at the
    peak of a gigabyte crash loop, whose lines repeat a few thousand pairs. The busy rows
    are not copied out (every column of a row per stats line: ~150 MiB at 5 GB of log, the
    peak of the run): the pairs are counted from the two columns, and a cited row is read
    from `points` by its index."""

    def __init__(
        self, points: pl.DataFrame, busy: pl.Expr, size: Pool, spread_: Spread, shared: bool
    ) -> None:
        self.spread = spread_
        self.shared = shared
        self._points = points
        pairs = (
            points.lazy()
            .select("usage", "running")
            .with_row_index("first")
            .filter(busy)
            .group_by("usage", "running")
            .agg(pl.col("first").min(), pl.len().alias("n"))
            .sort("first")
            .collect()
        )
        self._first: list[int] = pairs["first"].to_list()
        self.ranges = [
            payload_range(usage * size.usable, int(running), spread_, size.block_size, shared)
            for usage, running in zip(pairs["usage"], pairs["running"], strict=True)
        ]
        counts: list[int] = pairs["n"].to_list()
        self.count = sum(counts)
        # The median is monotone: each observation's true ratio lies in its range, so the
        # median ratio lies between the medians of the ends.
        self.bounds = Range(
            _median([r.low for r in self.ranges], counts),
            _median([r.high for r in self.ranges], counts),
        )

    def most_padded(self) -> tuple[dict[str, Any], Range]:
        """The observation whose upper bound is lowest (first of equals)."""
        k = min(range(len(self.ranges)), key=lambda k: (self.ranges[k].high, self._first[k]))
        return self._points.row(self._first[k], named=True), self.ranges[k]


def _median(values: list[float], counts: list[int]) -> float:
    """statistics.median of the list holding each value `counts` times, without it."""
    ordered = sorted(zip(values, counts, strict=True))
    total = sum(counts)
    wanted = (total - 1) // 2, total // 2  # the middle item, or the two middle items
    found: list[float] = []
    seen = 0
    for value, n in ordered:
        seen += n
        while len(found) < 2 and wanted[len(found)] < seen:
            found.append(value)
    low, high = found
    return low if total % 2 else (low + high) / 2


def _shares_prefixes(ctx: RuleContext, scope: str | None) -> bool:
    """Whether requests may share cached prefix blocks (then one slot serves several)."""
    row = ctx.config("enable_prefix_caching", scope)
    if row is not None and str(row["value"]).lower() == "false":
        return False
    hit = prefix_hit_rate(ctx, scope)
    return hit is None or hit > 0


def _floor_pct(ratio: float) -> str:
    """A lower bound in whole percent, rounded down so that it stays a bound."""
    return f"{math.floor(100 * ratio)}%"


def _range_text(bounds: Range) -> str:
    """Whole percent, the low end rounded down and the high end up: still bounds."""
    low, high = _floor_pct(bounds.low), f"{math.ceil(100 * bounds.high)}%"
    return low if low == high else f"{low}-{high}"


def _payload_comparison(
    ctx: RuleContext, scope: str | None, size: Pool, observed: _Observed
) -> Comparison:
    bounds = observed.bounds
    capped = "" if observed.shared else "; without shared prefixes at most 100 %"
    return ctx.compare(
        "payload: effective tokens / allocated slots" + (f" [{scope}]" if scope else ""),
        1.0,
        round(bounds.high, 3) if bounds.high != float("inf") else None,
        "ratio",
        [size.source],
        f"median over {observed.count} observations at {ctx.threshold('usage_min'):.0%}+ "
        f"usage; running requests {fmt_tokens(observed.spread.shortest)} to "
        f"{fmt_tokens(observed.spread.longest)} tokens each ({observed.spread.source}){capped}",
        low=round(bounds.low, 3),
        high=round(bounds.high, 3) if bounds.high != float("inf") else None,
    )


def _remedies(
    ctx: RuleContext, scope: str | None, size: Pool, live: float, hybrid: HybridBlocks | None
) -> list[Remedy]:
    out = [
        Remedy(
            "continuous batching with paged KV; bucket lengths (256 / 512 / 1k / 2k / 4k) "
            "where the engine pads",
            "slots padded to the longest sequence carry nothing: bucketing raised payload from "
            "about 20 % to 70 %+ in the worked example",
        )
    ]
    if hybrid is not None:
        out.append(hybrid.remedy())
    elif size.block_size and size.block_size > 16:
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
