"""What the requests and the pool look like, from whichever inputs hold it.

Shared by the layer-2 and layer-3 rules: request lengths (prompt, generated, max_tokens)
from the engine's histograms, else the client's request log, else request-logging lines;
the pool in tokens and blocks from the facts. Every number keeps the reference it came from
so comparisons can cite it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdiag.analyzer.model.engine import engine_of_replica
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.demand import slots
from kvdiag.analyzer.model.quantities.spread import Spread, exact, from_buckets, unknown
from kvdiag.analyzer.model.queries import histogram_buckets, histogram_mean
from kvdiag.domain.records.diagnosis import SourceRef

# SGLang's allocator hands out slots 1..max_total_num_tokens: its padding slot 0 comes on top
# of the stated pool (the buffers hold size + page_size), so every stated token is usable.
_WHOLE_POOL_ENGINES = frozenset({"sglang"})


@dataclass(frozen=True, slots=True)
class Lengths:
    """Per-request token counts over the window."""

    prompt: float  # mean prompt tokens
    generated: float  # mean generated tokens
    max_tokens: float | None  # mean max_tokens requested, when known
    requests: int
    source: str  # "metrics histograms" | "client request log" | "request log lines"
    p95_total: float | None = None  # p95 of prompt + generated, when buckets allow

    @property
    def peak(self) -> float:
        """What one request grows to: prompt + max_tokens (else what it generated)."""
        return self.prompt + (self.max_tokens if self.max_tokens else self.generated)

    @property
    def prompt_share(self) -> float:
        total = self.prompt + self.generated
        return self.prompt / total if total else 0.0


def lengths(ctx: Incident, replica: str | None = None) -> Lengths | None:
    """Request lengths from the best source available, or None."""
    prompt = histogram_mean(ctx, "request_prompt_tokens", replica)
    gen = histogram_mean(ctx, "request_generation_tokens", replica)
    if prompt and gen:
        max_tokens = histogram_mean(ctx, "request_params_max_tokens", replica)
        # No p95 here: vLLM's token buckets (1,000 / 2,000 / 5,000 ...) are too coarse to
        # interpolate a length from; the client log gives exact ones.
        return Lengths(
            prompt[0],
            gen[0],
            max_tokens[0] if max_tokens else None,
            prompt[1],
            "metrics histograms",
        )
    return _client_lengths(ctx, replica) or _log_lengths(ctx, replica)


def _client_lengths(ctx: Incident, replica: str | None) -> Lengths | None:
    where, params = "prompt_tokens IS NOT NULL", []
    if replica is not None:
        where += " AND replica = ?"
        params.append(replica)
    row = ctx.sql(
        "SELECT avg(prompt_tokens) AS p, avg(completion_tokens) AS g, avg(max_tokens) AS m, "
        "count(*) AS n, quantile_cont(prompt_tokens + coalesce(completion_tokens, 0), 0.95) AS q "
        f"FROM client_requests WHERE {where}",
        params,
    ).row(0, named=True)
    if not row["n"]:
        return None
    return Lengths(
        float(row["p"]),
        float(row["g"] or 0),
        row["m"],
        int(row["n"]),
        "client request log",
        row["q"],
    )


def _log_lengths(ctx: Incident, replica: str | None) -> Lengths | None:
    where, params = "prompt_tokens IS NOT NULL", []
    if replica is not None:
        where += " AND replica = ?"
        params.append(replica)
    row = ctx.sql(
        "SELECT avg(prompt_tokens) AS p, avg(max_tokens) AS m, count(*) AS n "
        f"FROM log_requests WHERE {where}",
        params,
    ).row(0, named=True)
    if not row["n"] or row["m"] is None:
        return None
    # Request logging states prompt and max_tokens, not what was generated: count the cap.
    return Lengths(
        float(row["p"]), float(row["m"]), float(row["m"]), int(row["n"]), "request log lines"
    )


def spread(ctx: Incident, replica: str | None = None) -> Spread:
    """Per-request length bounds from the best source: exact lengths from the client's
    request log or request-logging lines, else the engine's histogram buckets (vLLM's
    1-2-5 edges: a 22-token prompt is only known to be over 20 and at most 50), else
    nothing narrower than 1 token to max_model_len (unbounded when that is unknown)."""
    top = ctx.fact("max_model_len", replica)
    longest = float(top.value) if top is not None and isinstance(top.value, int | float) else None
    logged = _logged_spread(
        ctx, replica, "client_requests", "coalesce(completion_tokens, max_tokens)", longest
    ) or _logged_spread(ctx, replica, "log_requests", "max_tokens", longest)
    if logged is not None:
        return logged
    prompt = from_buckets(
        histogram_buckets(ctx, "request_prompt_tokens", replica), longest, "metrics histograms"
    )
    generated = from_buckets(histogram_buckets(ctx, "request_generation_tokens", replica), None, "")
    if prompt is not None and generated is not None:
        return prompt.with_generated(generated)
    return unknown(longest or math.inf, "no request lengths")


def _logged_spread(
    ctx: Incident, replica: str | None, table: str, grown: str, longest: float | None
) -> Spread | None:
    """Exact prompts from a request log; a request grows by what it generated, else by its
    max_tokens (the most it may), else to max_model_len."""
    where, params = "prompt_tokens IS NOT NULL", []
    if replica is not None:
        where += " AND replica = ?"
        params.append(replica)
    rows = ctx.sql(
        f"SELECT prompt_tokens AS p, prompt_tokens + {grown} AS t FROM {table} WHERE {where}",
        params,
    )
    if not rows.height or rows["t"].null_count() == rows.height:
        return None
    source = "client request log" if table == "client_requests" else "request log lines"
    highs = rows["t"].fill_null(longest or math.inf)
    return exact(rows["p"].to_list(), highs.to_list(), source)


@dataclass(frozen=True, slots=True)
class Pool:
    """The KV pool of one replica, in tokens."""

    tokens: int
    block_size: int | None
    source: SourceRef | None
    null_block: bool = True  # the engine keeps one block of the stated pool out of use

    @property
    def usable(self) -> int:
        """Tokens requests can use: vLLM v1 keeps one null block out of the pool."""
        if self.null_block and self.block_size and self.tokens > self.block_size:
            return self.tokens - self.block_size
        return self.tokens

    def slots(self, per_request: float) -> float:
        """Slots one request of `per_request` tokens holds: whole blocks."""
        return slots(per_request, self.block_size)

    def fit(self, per_request: float) -> int:
        need = self.slots(per_request)
        return int(self.usable // need) if need else 0


def pool(ctx: Incident, replica: str | None = None) -> Pool | None:
    fact = ctx.fact("pool_tokens", replica)
    if fact is None or not isinstance(fact.value, int | float):
        return None
    block = ctx.fact("block_size", replica)
    size = int(block.value) if block is not None and isinstance(block.value, int | float) else None
    engine = engine_of_replica(ctx, ctx.facts, replica or "default")
    return Pool(int(fact.value), size, fact.source, engine not in _WHOLE_POOL_ENGINES)


def fmt_tokens(n: float) -> str:
    return f"{n:,.0f}"


def pct(ratio: float) -> str:
    """A usage ratio as a percentage that keeps small values visible (0.3 %, not 0 %)."""
    return f"{ratio:.1%}" if ratio < 0.1 else f"{ratio:.0%}"


def fmt_request(tokens: float, slots: float) -> str:
    """A request's size in tokens, and in slots when whole blocks make it larger."""
    held = f" ({fmt_tokens(slots)} slots)" if round(slots) != round(tokens) else ""
    return f"{fmt_tokens(tokens)} tokens{held}"
