"""What the running requests may grow to, bounded by what the evidence allows.

A request grows to prompt + max_tokens (the most it may generate), else to what it
generated; max_model_len caps both. Its length comes from the best source: exact ones from
a client request log or request-logging lines, bucket edges from the engine's histograms,
else nothing narrower than 1 token to max_model_len. The running requests at a moment are
not the average request: R of them hold at least the R smallest and at most the R largest
of the requests that could have been running. Where the client log's send and end times
line up with the server's clock, those are the requests in flight at that observation;
else any request of the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.demand import DemandRange
from kvdiag.analyzer.model.quantities.spread import Spread, exact, from_buckets, unknown
from kvdiag.analyzer.model.quantities.workload import Pool, fmt_tokens
from kvdiag.analyzer.model.queries import col_max, histogram_buckets

# A scrape's time is when the scraper asked, a stats line's when the engine wrote it; a
# request counts as in flight from a second before it was sent to a second after it ended,
# which only widens the bounds. A larger offset between the client's and the server's
# clocks shows at the edges of the load (see `_clocks_agree`).
SLACK = timedelta(seconds=1)
NO_LENGTHS = "no request lengths"
_CLIENT = "client request log"


@dataclass(frozen=True, slots=True)
class Growth:
    """The running requests' growth against the pool, in slots, at its worst moment."""

    demand: DemandRange  # the highest bound over the observations, and the highest low
    spread: Spread  # what one request grows to, in tokens, over the whole window
    grows: str  # "prompt + max_tokens" | "prompt + generated" | "max_model_len"
    picked: str  # how the running requests were bounded: at the moment, or over the window
    at: datetime | None  # the observation of the highest bound (None: the whole window)

    @property
    def lengths_known(self) -> bool:
        """Whether any request length bounds it (else max_model_len alone does)."""
        return self.spread.source != NO_LENGTHS

    def basis(self) -> str:
        """What each request grows to and where that comes from, for a title or note."""
        low, high = self.spread.shortest, self.spread.longest
        if not self.lengths_known:
            return f"no request lengths: each at most max_model_len, {fmt_tokens(high)} tokens"
        each = (
            fmt_tokens(high)
            if round(low) == round(high)
            else f"{fmt_tokens(low)} to {fmt_tokens(high)}"
        )
        return f"{self.grows} = {each} tokens each, {self.spread.source}{self.picked}"


def growth(
    ctx: Incident,
    points: pl.DataFrame,
    replica: str | None,
    size: Pool,
    *,
    with_waiting: bool = False,
) -> Growth | None:
    """What the requests running at each of `points` (running + waiting: `with_waiting`)
    grow to; None when nothing bounds a request (no lengths and no max_model_len)."""
    grown = grown_lengths(ctx, replica)
    if grown is None:
        return None
    spread, grows, timed = grown
    held = spread.in_slots(size.block_size)
    need = (pl.col("running") + pl.col("waiting") if with_waiting else pl.col("running")).fill_null(
        0
    )
    # The most in flight at once, without a frame of the busy observations: a row per stats
    # line of a long log (~55 MiB at 5 GB), built below only where client times need it.
    most = int(points.select(need.max()).item() or 0)
    if most <= 0:
        return Growth(DemandRange(0, 0.0, 0.0, size.usable), spread, grows, "", None)
    moments = None
    if timed is not None:
        busy = points.select("ts", need.alias("need"), _in_queue()).filter(pl.col("need") > 0)
        span = (points["ts"].min(), points["ts"].max())
        moments = _at_each_moment(timed, busy, size, span)
    if moments is not None:
        worst = moments.sort(["high", "ts"], descending=[True, False]).row(0, named=True)
        demand = DemandRange(
            int(worst["need"]),
            col_max(moments, "low"),
            float(worst["high"]),
            size.usable,
        )
        picked = ", the requests in flight at each observation"
        return Growth(demand, spread, grows, picked, worst["ts"])
    demand = DemandRange(most, held.low(most), held.high(most), size.usable)
    return Growth(demand, spread, grows, "", None)


def _in_queue() -> pl.Expr:
    """What the server holds at an observation: every one of them is in flight."""
    return (pl.col("running").fill_null(0) + pl.col("waiting").fill_null(0)).alias("in_queue")


def grown_lengths(
    ctx: Incident, replica: str | None
) -> tuple[Spread, str, pl.DataFrame | None] | None:
    """(what each request grows to, how, the client's timed rows when it has times)."""
    top = ctx.fact("max_model_len", replica)
    longest = float(top.value) if top is not None and isinstance(top.value, int | float) else None
    logged = _logged(ctx, replica, longest)
    if logged is not None:
        return logged
    prompt = from_buckets(
        histogram_buckets(ctx, "request_prompt_tokens", replica), longest, "metrics histograms"
    )
    cap = histogram_buckets(ctx, "request_params_max_tokens", replica)
    extra = from_buckets(
        cap or histogram_buckets(ctx, "request_generation_tokens", replica), None, ""
    )
    if prompt is not None and extra is not None:
        grown = prompt.grown_by(extra)
        grown = grown.capped(longest) if longest else grown
        return grown, "prompt + max_tokens" if cap else "prompt + generated", None
    if longest is None:
        return None
    return unknown(longest, NO_LENGTHS), "max_model_len", None


def _logged(
    ctx: Incident, replica: str | None, longest: float | None
) -> tuple[Spread, str, pl.DataFrame | None] | None:
    """Exact lengths from the client's log, else from request-logging lines."""
    for table, grown, timed in (
        ("client_requests", "coalesce(max_tokens, completion_tokens)", True),
        ("log_requests", "max_tokens", False),
    ):
        where, params = "prompt_tokens IS NOT NULL", []
        if replica is not None:
            where += " AND replica = ?"
            params.append(replica)
        times = "send_ts AS sent, end_ts AS ended, " if timed else ""
        rows = ctx.sql(
            f"SELECT {times}prompt_tokens + {grown} AS grown, max_tokens FROM {table} "
            f"WHERE {where}",
            params,
        )
        if not rows.height or rows["grown"].null_count() == rows.height:
            continue
        top = longest or float("inf")
        grown_to = rows["grown"].cast(pl.Float64).fill_null(top).clip(upper_bound=top)
        source = _CLIENT if timed else "request log lines"
        spread = exact(grown_to.to_list(), grown_to.to_list(), source)
        how = (
            "prompt + max_tokens"
            if rows["max_tokens"].null_count() < rows.height
            else ("prompt + generated")
        )
        return spread, how, rows.with_columns(grown=grown_to) if timed else None
    return None


def _at_each_moment(
    timed: pl.DataFrame, busy: pl.DataFrame, size: Pool, span: tuple[object, object]
) -> pl.DataFrame | None:
    """Per observation (ts, need): the fewest and the most slots its `need` running
    requests hold, picked among the requests in flight then; None where the client's
    times cannot stand for the server's."""
    if timed["sent"].null_count() or busy["ts"].null_count():
        return None  # an untimed request or observation cannot be placed
    last = busy["ts"].max()
    requests = timed.select(
        "sent",
        pl.col("ended").fill_null(last),  # no end: in flight to the last observation
        _slots(pl.col("grown"), size.block_size).alias("slots"),
    )
    moments = busy.unique(["ts", "need", "in_queue"])
    pairs = moments.join_where(
        requests,
        pl.col("sent") <= pl.col("ts") + SLACK,
        pl.col("ended") >= pl.col("ts") - SLACK,
    )
    group = ["ts", "need", "in_queue"]
    ranked = pairs.with_columns(
        pl.col("slots").rank("ordinal").over(group).alias("up"),
        pl.col("slots").rank("ordinal", descending=True).over(group).alias("down"),
    )
    bounds = ranked.group_by(group).agg(
        pl.len().alias("in_flight"),
        pl.col("slots").filter(pl.col("up") <= pl.col("need")).sum().alias("low"),
        pl.col("slots").filter(pl.col("down") <= pl.col("need")).sum().alias("high"),
    )
    if not _clocks_agree(moments, bounds, requests, span):
        return None
    return bounds


def _slots(tokens: pl.Expr, block_size: int | None) -> pl.Expr:
    """demand.slots as an expression: whole blocks."""
    if not block_size or block_size <= 1:
        return tokens
    return (tokens / block_size).ceil() * block_size


def _clocks_agree(
    moments: pl.DataFrame,
    bounds: pl.DataFrame,
    requests: pl.DataFrame,
    span: tuple[object, object],
) -> bool:
    """Whether the client's times can pick the server's running requests.

    Every request the server holds (running or waiting) was sent before and ends after
    it, so at each observation the client must have at least that many in flight (fewer:
    the log misses some requests, or its clock is off). A steady load hides an offset, so
    the observations must also span the start or the end of the client's load, where a
    clock off by more than the slack leaves the server busy with nothing in flight.
    """
    if bounds.height < moments.height:
        return False  # an observation with requests held and none in flight
    if bounds.filter(pl.col("in_flight") < pl.col("in_queue")).height:
        return False
    first, last = span
    start, end = requests["sent"].min(), requests["ended"].max()
    return bool(first <= start <= last or first <= end <= last)  # type: ignore[operator]
