"""KV102: the pool is far smaller than the card allows, and which term ate the memory."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import polars as pl

from kvdiag.analyzer.model.engine import ENGINE_OF_INPUT
from kvdiag.analyzer.model.quantities.card import Card, card
from kvdiag.analyzer.model.quantities.ledger import Ledger, fmt_gib, nominal_pool_gib, waterfall
from kvdiag.analyzer.model.quantities.load_picture import (
    load_points,
    points_by_replica,
    preemptions,
)
from kvdiag.analyzer.model.quantities.vocabulary import two_engines, vocabularies, vocabulary
from kvdiag.analyzer.model.quantities.workload import fmt_tokens, pct
from kvdiag.analyzer.model.queries import col_max
from kvdiag.domain.ledger import ACTIVATION, CUDA_GRAPH, NON_TORCH, UNATTRIBUTED, term
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Severity,
)
from kvdiag.rules.base import Rule, RuleContext, Threshold

_TABLES = ("log_memory", "log_kv_pool", "gpu_snapshots", "config")


class ShrunkenPool(Rule):
    """The KV pool is far below what the card allows; the attribution waterfall says why.

    Expected (nominal) pool = card total x gpu_memory_utilization - weights - an allowance of
    `allowance_frac` of the card for activations, non-torch memory and CUDA graphs
    (A100-80G, 7B, 0.9: 50 GB or more). A pool under `shrunk_ratio` of it is shrunken; the
    ledger (from the start-up memory lines where printed) names the term that took the
    budget, and what it cannot account for (a co-tenant, a card not empty at start). A pool
    whose usage reaches `usage_high` while nvidia-smi shows `free_min_gib` or more free (and
    at least `free_vs_pool` of the pool) cannot reach that memory. An explicitly sized pool
    (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE) is the operator's choice: it is
    reported, as info, only when it bounded the load (usage at `usage_full` while requests
    waited or were preempted). On the CPU backend the "card" is the node's memory and
    nvidia-smi does not apply.
    """

    code = "KV102"
    name = "pool.shrunken_pool"
    layer = 1
    severity = Severity.WARNING
    implies = IncidentClass.SHRUNKEN_POOL
    requires_any = _TABLES
    thresholds = (
        Threshold(
            "shrunk_ratio", 0.70, "ratio", "a pool under this share of the nominal pool is shrunken"
        ),
        Threshold(
            "allowance_frac",
            0.08,
            "ratio",
            "share of the card allowed for activations, non-torch and graphs",
        ),
        Threshold("free_min_gib", 4.0, "GiB", "free card memory worth reaching"),
        Threshold("free_vs_pool", 0.50, "ratio", "free memory at least this share of the pool"),
        Threshold("usage_high", 0.80, "ratio", "KV usage at which unreachable free memory matters"),
        Threshold(
            "usage_full", 0.90, "ratio", "KV usage at which an explicit pool bounded the load"
        ),
    )

    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        names: set[str] = set()
        for t in _TABLES:
            names |= set(
                ctx.sql(f"SELECT DISTINCT replica FROM {t} WHERE replica IS NOT NULL")[
                    "replica"
                ].to_list()
            )
        multi = len(names) > 1
        for name in sorted(names) or [""]:
            yield from self._replica(ctx, card(ctx, name if multi else None), multi)

    def _replica(
        self, ctx: RuleContext, c: Card, multi: bool
    ) -> Iterator[Finding | Comparison | RuledOut]:
        scope = c.replica if multi else None
        if c.pool_gib is None:  # undecidable: no pool size in bytes to hold against the card
            return
        if two_engines(ctx, c.replica or "default"):
            # Two engines' pools (a comparison on one card): side by side, not one ledger.
            yield from _side_by_side(ctx, c.replica or "default")
            return
        points = load_points(ctx)
        if multi and points.height:
            points = points_by_replica(ctx).get(str(c.replica), points.clear())
        peak = col_max(points, "usage") if points.height else None
        if c.explicit:
            yield from self._explicit(ctx, c, peak, points, scope)
            return
        yield from _ledger_rows(ctx, c, scope)
        yield from self._carved(ctx, c, peak, scope)

    def _explicit(
        self, ctx: RuleContext, c: Card, peak: float | None, points: pl.DataFrame, scope: str | None
    ) -> Iterator[Finding | Comparison | RuledOut]:
        assert c.pool_gib is not None
        where = "node memory" if c.device == "CPU" else "card"
        note = (
            "CPU backend: the pool is host memory; nvidia-smi does not apply"
            if c.device == "CPU"
            else ""
        )
        yield ctx.compare(
            f"KV pool (set explicitly) vs {where}",
            c.total_gib,
            round(c.pool_gib, 4),
            "GiB",
            c.evidence,
            note,
        )
        waited = bool(points.height and (points["waiting"].max() or 0))
        binding = (
            peak is not None
            and peak >= ctx.threshold("usage_full")
            and (waited or preemptions(ctx, scope).count)
        )
        size = f"{c.pool_gib * 1024:,.1f} MiB" if c.pool_gib < 1 else fmt_gib(c.pool_gib)
        if not binding:
            shown = pct(peak) if peak is not None else "unknown"
            yield ctx.rule_out(
                f"the pool was set explicitly ({size}) and did not bound the load "
                f"(peak usage {shown})"
            )
            return
        tokens = getattr(ctx.fact("pool_tokens", scope), "value", None)
        conc = getattr(ctx.fact("max_concurrency", scope), "value", None)
        detail = ""
        if isinstance(tokens, int | float) and isinstance(conc, int | float):
            detail = f" ({fmt_tokens(tokens)} tokens, {conc:.2f} requests of max_model_len)"
        title = (
            f"The pool was set explicitly to {size}{detail} and it, not the {where}, bounded "
            f"this load (usage peaked at {pct(peak or 0)})"
        )
        if c.total_gib:
            share = c.pool_gib / c.total_gib
            title += f"; the {where} has {fmt_gib(c.total_gib)}, {share:.1%} of it given to KV"
        remedy = Remedy(
            vocabulary(ctx, scope).phrase("raise_explicit_pool"),
            "the size this load needs is priced under KV301",
        )
        yield ctx.finding(title, c.evidence, [remedy], severity=Severity.INFO, replica=scope)

    def _carved(
        self, ctx: RuleContext, c: Card, peak: float | None, scope: str | None
    ) -> Iterator[Finding | RuledOut]:
        assert c.pool_gib is not None
        nominal = None
        if c.total_gib and c.utilization and c.weights_gib is not None:
            nominal = nominal_pool_gib(
                c.total_gib, c.utilization, c.weights_gib, ctx.threshold("allowance_frac")
            )
        squeezed = (
            nominal is not None
            and nominal > 0
            and c.pool_gib < ctx.threshold("shrunk_ratio") * nominal
        )
        free_gpu = min(c.gpus, key=lambda g: g.free_gib) if c.gpus else None
        unreachable = (
            free_gpu is not None
            and peak is not None
            and peak >= ctx.threshold("usage_high")
            and free_gpu.free_gib >= ctx.threshold("free_min_gib")
            and free_gpu.free_gib >= ctx.threshold("free_vs_pool") * c.pool_gib
        )
        if not (squeezed or unreachable):
            yield ctx.rule_out(_fine(c, nominal))
            return
        parts = []
        if squeezed:
            assert (
                nominal is not None and c.total_gib and c.utilization and c.weights_gib is not None
            )
            parts.append(
                f"KV pool {fmt_gib(c.pool_gib)} is {c.pool_gib / nominal:.0%} of the "
                f"{fmt_gib(nominal)} the card should give ({fmt_gib(c.total_gib)} x "
                f"{c.utilization:g} - {fmt_gib(c.weights_gib)} weights - "
                f"{ctx.threshold('allowance_frac'):.0%} allowance)"
            )
        else:
            parts.append(f"KV pool {fmt_gib(c.pool_gib)} ran at {pct(peak or 0)} usage")
        ledger = c.ledger()
        top = ledger.largest_consumer() if ledger else None
        if top is not None:
            parts.append(f"{term(top[0]).finding_label} took {fmt_gib(top[1])}")
        if unreachable and free_gpu is not None:
            parts.append(
                f"nvidia-smi shows {fmt_gib(free_gpu.free_gib)} free on GPU {free_gpu.index} "
                "that the pool cannot reach"
            )
        if c.others:
            parts.append(
                "other processes hold " + ", ".join(f"{n} {fmt_gib(g)}" for n, g, _ in c.others)
            )
        if c.start_used_gib is not None and c.start_used_gib >= 1:
            parts.append(f"{fmt_gib(c.start_used_gib)} was in use before the engine started")
        ev = (
            list(c.evidence)
            + ([free_gpu.evidence] if unreachable and free_gpu else [])
            + [e for _, _, e in c.others]
        )
        severity = Severity.ERROR if squeezed and unreachable else Severity.WARNING
        yield ctx.finding(
            "; ".join(parts), ev, _remedies(ctx, c, top, scope), severity=severity, replica=scope
        )


def _fine(c: Card, nominal: float | None) -> str:
    assert c.pool_gib is not None
    if nominal:
        return (
            f"the pool ({fmt_gib(c.pool_gib)}) is {c.pool_gib / nominal:.0%} of what the card "
            f"should give ({fmt_gib(nominal)})"
        )
    return f"the pool is {fmt_gib(c.pool_gib)}; no ledger or snapshot shows it squeezed"


def _tokens_per_gib(ctx: RuleContext, c: Card, scope: str | None) -> float | None:
    """Pool tokens per GiB of pool: prices a GiB returned to the pool in tokens."""
    if not c.pool_gib:
        return None
    tokens = ctx.fact("pool_tokens", scope)
    if tokens is not None and isinstance(tokens.value, int | float):
        return float(tokens.value) / c.pool_gib
    # v0 prints blocks and concurrency, not tokens: concurrency x max_model_len is the pool.
    row = ctx.sql(
        "SELECT concurrency * max_model_len AS t FROM log_kv_pool "
        "WHERE concurrency IS NOT NULL AND max_model_len IS NOT NULL ORDER BY t LIMIT 1"
    )
    return float(row.item()) / c.pool_gib if row.height else None


def _remedies(
    ctx: RuleContext, c: Card, top: tuple[str, float] | None, scope: str | None
) -> list[Remedy]:
    per_gib = _tokens_per_gib(ctx, c, scope)
    words = vocabulary(ctx, scope)

    def worth(gib: float) -> str:
        return f"{fmt_gib(gib)}" + (
            f" = {fmt_tokens(gib * per_gib)} tokens of pool" if per_gib else ""
        )

    out = []
    if top is not None:
        name, gib = top
        action = {
            ACTIVATION.key: words.phrase("shrink_activation"),
            CUDA_GRAPH.key: words.phrase("fewer_graphs"),
            NON_TORCH.key: "trim communication buffers (NCCL), unneeded components and profilers",
            UNATTRIBUTED.key: "start the engine on an empty card; stop co-tenant processes",
        }[name]
        out.append(Remedy(action, f"{term(name).finding_label} took {worth(gib)}"))
    for label, gib, _ in c.others:
        out.append(Remedy(f"move {label} off this GPU", f"it holds {worth(gib)}"))
    if c.utilization:
        out.append(
            Remedy(
                "reclaim non-KV memory before touching " + words.name("gpu_memory_utilization"),
                f"raising it from {c.utilization:g} only narrows the workspace margin; "
                "the case study fixed a squeezed pool at 0.88, with max-num-seqs and "
                "prefix caching",
            )
        )
    return out


def _ledger_rows(ctx: RuleContext, c: Card, scope: str | None) -> Iterator[Comparison]:
    """The waterfall, one comparison per step, and the free memory per GPU."""
    tag = f" [{scope}]" if scope else ""
    ledger: Ledger | None = c.ledger()
    if ledger is not None:
        fraction = vocabulary(ctx, scope).name("gpu_memory_utilization")
        for label, gib in waterfall(ledger, fraction):
            yield ctx.compare(f"ledger: {label}{tag}", None, round(gib, 2), "GiB", c.evidence)
        if c.weights_gib is not None:
            nominal = nominal_pool_gib(
                ledger.total_gib, ledger.utilization, c.weights_gib, ctx.threshold("allowance_frac")
            )
            yield ctx.compare(
                f"KV pool vs nominal pool{tag}",
                round(nominal, 2),
                round(ledger.pool_gib, 2),
                "GiB",
                c.evidence,
                f"nominal = total x {ledger.utilization:g} - weights - "
                f"{ctx.threshold('allowance_frac'):.0%} of the card; pool from {c.pool_how}",
            )
    for g in c.gpus:
        yield ctx.compare(
            f"free memory on GPU {g.index}{tag}",
            None,
            round(g.free_gib, 2),
            "GiB",
            [g.evidence],
            "nvidia-smi: memory the pool cannot reach",
        )


def _side_by_side(ctx: RuleContext, replica: str) -> Iterator[Comparison]:
    """Each engine's pool on the same hardware: memory per GPU and tokens, one row each."""
    rows = ctx.sql(
        f"SELECT p.*, {ENGINE_OF_INPUT} AS _engine FROM log_kv_pool p "
        "JOIN inputs i ON i.path = p.source_path WHERE p.replica = ? "
        "AND (p.gib IS NOT NULL OR p.tokens IS NOT NULL) "
        "ORDER BY _engine, p.gib NULLS LAST, p.tokens, p.source_path, p.source_line",
        [replica],
    )
    for (engine,), part in rows.group_by("_engine", maintain_order=True):
        label = vocabularies()[str(engine)].label if engine in vocabularies() else str(engine)
        for col, unit, what in (("gib", "GiB", "memory per GPU"), ("tokens", "tokens", "size")):
            hit = part.filter(pl.col(col).is_not_null())
            if hit.height:
                row = hit.row(0, named=True)
                ev = ctx.evidence(row, f"pool_{col}", row[col])
                yield ctx.compare(f"{label} KV pool {what}", None, row[col], unit, [ev])
