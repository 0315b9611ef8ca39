"""KV203: a second KV tier (CPU offload, an external prefix cache) stores but serves no hits."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kvdiag.analyzer.model.lmcache import ConnectorTier, last_log_line, lmcache_tier
from kvdiag.analyzer.model.offload import Counted, OffloadTier, offload_tier
from kvdiag.analyzer.model.quantities.ledger import fmt_gib
from kvdiag.analyzer.model.quantities.workload import fmt_tokens
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Evidence,
    Finding,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold

_GIB = 1024**3


class OffloadNoHits(Rule):
    """An offload tier or external prefix cache that stored KV but served (almost) no hits.

    vLLM's OffloadingConnector (`--kv-offloading-size`, 0.19.1+) copies evicted or finished
    KV blocks from the GPU pool into CPU memory and loads them back when a later prompt
    shares their prefix; LMCache and the other KV connectors do the same against their own
    store. Over the window: the tier stored at least `min_stored_mib` MiB (GPU_to_CPU) and
    its external prefix cache was asked for at least `min_queries` tokens, yet it served
    under `low_hit` of them (`vllm:external_prefix_cache_hits / _queries`), or it loaded back
    under `low_load` of what it stored (CPU_to_GPU vs GPU_to_CPU bytes) when the connector
    reports no token counts. Every store costs a GPU->CPU copy and pinned host memory: a
    tier that never hits is overhead, the answer to "KV offload to CPU gives 0 % hits".

    LMCache is judged in its own numbers (facts/lmcache.py): the tokens it stored (at least
    `min_stored_tokens`; multi-process LMCache counts only completed stores) against the
    prompt tokens its lookups were asked for and found, from its metrics, or from its log
    lines when none were scraped; the finding names LMCache and quotes its log line.
    """

    code = "KV203"
    name = "payload.offload_no_hits"
    layer = 2
    severity = Severity.WARNING
    implies = None
    requires_any = ("metric_samples", "log_kv_connector")
    thresholds = (
        Threshold("low_hit", 0.01, "ratio", "external prefix cache hits / queries (tokens)"),
        Threshold("low_load", 0.01, "ratio", "bytes loaded back / bytes stored"),
        Threshold("min_stored_mib", 64.0, "MiB", "stores needed before hits are judged"),
        Threshold("min_queries", 10_000.0, "tokens", "lookups needed before hits are judged"),
        Threshold(
            "min_stored_tokens", 10_000.0, "tokens", "connector stores before hits are judged"
        ),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        connector = ctx.memo("lmcache_tier", lambda: lmcache_tier(ctx))
        if connector is not None:
            yield from _connector_hits(ctx, connector)
        tier = ctx.memo("offload_tier", lambda: offload_tier(ctx))
        if not tier.present:
            return
        yield from self._hits(ctx, tier)  # bytes of vLLM's own offload connector

    def _hits(self, ctx: RuleContext, tier: OffloadTier) -> Iterator[Finding | Comparison]:
        stored = tier.stored_bytes
        if stored is None or stored.value < ctx.threshold("min_stored_mib") * 1024**2:
            return
        evidence = [_ev(ctx, stored, "offload stored bytes")]
        rate = tier.external_hit_rate
        queries = tier.external_queries
        if rate is not None and queries is not None:
            yield ctx.compare(
                "offload / external prefix cache hit rate",
                ctx.threshold("low_hit"),
                round(rate, 4),
                "ratio",
                [_ev(ctx, queries, "external prefix cache queries")],
                "external_prefix_cache_hits / external_prefix_cache_queries over the window",
                threshold=True,
            )
            if queries.value < ctx.threshold("min_queries") or rate >= ctx.threshold("low_hit"):
                return
            if tier.external_hits is not None:
                evidence.append(_ev(ctx, tier.external_hits, "external prefix cache hits"))
            evidence.append(_ev(ctx, queries, "external prefix cache queries"))
            said = (
                f"{rate:.1%} of {fmt_tokens(queries.value)} prompt tokens looked up "
                "were found there"
            )
        else:
            loaded = tier.loaded_bytes
            ratio = (loaded.value if loaded is not None else 0.0) / stored.value
            if ratio >= ctx.threshold("low_load"):
                return
            if loaded is not None:
                evidence.append(_ev(ctx, loaded, "offload loaded bytes"))
            said = f"it loaded back {ratio:.1%} of that ({_size(loaded.value if loaded else 0)})"
        if tier.loaded_bytes is not None and rate is not None:
            said += f"; {_size(tier.loaded_bytes.value)} were loaded back to the GPU"
        size = ""
        if tier.tier_bytes is not None:
            size = f" of a {_size(tier.tier_bytes[0])} CPU tier"
        title = (
            f"The KV offload tier stored {_size(stored.value)}{size} over the window but served "
            f"almost no hits: {said}. The copies cost GPU->CPU bandwidth and pinned memory "
            "for nothing"
        )
        yield ctx.finding(title, evidence, _remedies(ctx))


def _connector_hits(ctx: RuleContext, tier: ConnectorTier) -> Iterator[Finding | Comparison]:
    """A KV connector (LMCache) judged in its own numbers: tokens stored, looked up, found."""
    stored, lookups, rate = tier.stored_tokens, tier.lookup_tokens, tier.hit_rate
    if lookups is None or rate is None:
        return
    name = tier.connector
    yield ctx.compare(
        f"{name} hit rate",
        ctx.threshold("low_hit"),
        round(rate, 4),
        "ratio",
        [_ev(ctx, lookups, f"{name} lookup tokens")],
        f"{name}'s hit tokens / lookup tokens over the window (its {tier.origin})",
        threshold=True,
    )
    if not _stored_enough(ctx, tier):
        return
    if lookups.value < ctx.threshold("min_queries") or rate >= ctx.threshold("low_hit"):
        return
    evidence = [_ev(ctx, lookups, f"{name} lookup tokens")]
    if stored is not None:
        evidence.insert(0, _ev(ctx, stored, f"{name} stored tokens"))
        what = f"stored {fmt_tokens(stored.value)} tokens"
    else:
        assert tier.store_requests is not None  # _stored_enough
        evidence.insert(0, _ev(ctx, tier.store_requests, f"{name} stores"))
        what = f"completed {tier.store_requests.value:,.0f} stores"
    if tier.hit_tokens is not None:
        evidence.append(_ev(ctx, tier.hit_tokens, f"{name} hit tokens"))
    if tier.origin == "metrics" and (line := last_log_line(ctx, "lookup")) is not None:
        # the connector's own words for one request, beside its counters
        evidence.append(ctx.evidence(line, f"{name} hit tokens (log)", line["hit_tokens"]))
    title = (
        f"{name} {what} over the window but its lookups "
        f"found almost none: {rate:.1%} of {fmt_tokens(lookups.value)} prompt tokens looked "
        f"up were in {name}. The stores cost GPU->CPU copies and {name}'s memory for nothing"
    )
    yield ctx.finding(title, evidence, _connector_remedies(name))


def _stored_enough(ctx: RuleContext, tier: ConnectorTier) -> bool:
    """Enough stores to judge hits: tokens where counted, else any completed store."""
    if tier.stored_tokens is not None:
        return tier.stored_tokens.value >= ctx.threshold("min_stored_tokens")
    return tier.store_requests is not None and tier.store_requests.value > 0


def _connector_remedies(name: str) -> list[Remedy]:
    return [
        Remedy(
            "check that requests share prefixes the GPU pool has already evicted",
            f"{name} only hits when a later prompt repeats a prefix it stored (in whole "
            "chunks); unique prompts, or a GPU prefix cache that keeps every shared prefix, "
            "leave nothing for it to serve",
        ),
        Remedy(
            f"turn {name} off (drop its kv_connector from kv_transfer_config) or keep it "
            "for the workloads that repeat prefixes",
            f"every store is a GPU->CPU copy of the request's KV and holds {name}'s CPU memory",
        ),
        Remedy(
            "if the prefixes are shared, route requests with the same prefix to the same "
            f"replica, or give {name} a shared remote backend",
            f"a local {name} CPU cache serves only its own instance",
        ),
    ]


def _ev(ctx: RuleContext, counted: Counted, what: str) -> Evidence:
    return ctx.evidence(counted.row, what, int(counted.value))


def _size(n: float) -> str:
    return fmt_gib(n / _GIB) if n >= _GIB / 10 else f"{n / 1024**2:,.0f} MiB"


def _remedies(ctx: RuleContext) -> list[Remedy]:
    return [
        Remedy(
            "check that requests share prefixes the GPU pool has already evicted",
            "the tier only hits when a later prompt repeats a prefix after the GPU's own "
            "prefix cache dropped it; unique prompts (or a GPU pool big enough to keep "
            "every shared prefix) leave nothing for it to serve",
        ),
        Remedy(
            "turn the tier off (unset kv_offloading_size) or store only reused blocks "
            '(kv_connector_extra_config {"store_threshold": 2})',
            "stores skipped below the reuse threshold are counted in "
            "vllm:kv_offload_stores_skipped; the GPU->CPU copies and pinned host memory "
            "are saved",
        ),
        Remedy(
            "if the prefixes are shared, route requests with the same prefix to the same replica",
            "a CPU tier is local to its instance: a prefix stored on one replica never hits "
            "on another",
        ),
    ]
