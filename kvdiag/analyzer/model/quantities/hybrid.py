"""vLLM hybrid (attention + Mamba) models: the block size the engine chose, and why.

vLLM 0.10+ keeps a hybrid model's attention KV and Mamba state in one pool of equal pages,
so it raises the attention block until one attention page holds a Mamba state page
(`Setting attention block size to N tokens ...`) and pads the Mamba page to the rest
(`Padding mamba page size by X% ...`). N is not the operator's --block-size: it follows from
the state's size, and short sequences leave most of such a block empty. The page sizes are
priced in bytes when config.json gives the attention layers' KV bytes per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.model.quantities.workload import fmt_tokens
from kvdiag.domain.records.diagnosis import Evidence, Remedy

_EVENTS = ("hybrid_block_size", "mamba_page_padding")


@dataclass(frozen=True, slots=True)
class HybridBlocks:
    """The attention block the engine raised, the Mamba page padding, the lines saying so."""

    block_size: int
    padding_pct: float | None
    rows: tuple[dict[str, Any], ...]
    layer_bytes: float | None  # attention KV bytes per token of one layer, per GPU

    def evidence(self, ctx: Incident) -> list[Evidence]:
        out = []
        for row in self.rows:
            if row["event"] == "hybrid_block_size":
                out.append(ctx.evidence(row, "block_size", row["block_size"]))
            else:
                out.append(ctx.evidence(row, "padding_pct", row["padding_pct"]))
        return out

    def pages(self) -> str:
        """The two page sizes, in bytes when known, else in tokens of one attention layer."""
        pad = self.padding_pct or 0.0
        mamba = self.block_size / (1 + pad / 100)
        if self.layer_bytes:
            attn_bytes = self.block_size * self.layer_bytes
            return (
                f"attention page {fmt_tokens(self.block_size)} tokens x "
                f"{self.layer_bytes:,.0f} bytes = {_mib(attn_bytes)}, Mamba state page "
                f"{_mib(attn_bytes / (1 + pad / 100))} padded by {pad:g} %"
            )
        return (
            f"one attention page of {fmt_tokens(self.block_size)} tokens holds one Mamba state "
            f"page (the KV of about {fmt_tokens(mamba)} tokens, padded by {pad:g} %)"
        )

    def remedy(self) -> Remedy:
        return Remedy(
            "a smaller Mamba state: --mamba-ssm-cache-dtype / --mamba-cache-dtype (where the "
            "model tolerates it); --block-size cannot lower a hybrid model's block",
            f"vLLM sized the {fmt_tokens(self.block_size)}-token block to the Mamba state page "
            f"({self.pages()}): a smaller state makes a smaller page and a smaller block",
        )


def hybrid_blocks(ctx: Incident, scope: str | None) -> HybridBlocks | None:
    """The engine's own block-size choice for a hybrid model, or None when it printed none."""
    rows = ctx.sql(
        "SELECT * FROM log_kv_pool WHERE event IN (?, ?)"
        + (" AND replica = ?" if scope else "")
        + " ORDER BY source_path, source_line",
        [*_EVENTS, scope] if scope else list(_EVENTS),
    ).to_dicts()
    sizes = [r for r in rows if r["event"] == "hybrid_block_size"]
    if not sizes:
        return None
    pads = [r for r in rows if r["event"] == "mamba_page_padding"]
    shown = (sizes[0], pads[0]) if pads else (sizes[0],)
    pad = float(pads[0]["padding_pct"]) if pads else None
    return HybridBlocks(int(sizes[0]["block_size"]), pad, shown, _layer_bytes(ctx, scope))


def _layer_bytes(ctx: Incident, scope: str | None) -> float | None:
    """KV bytes per token of one attention layer: the model's per-token bytes over its
    attention layers (Mamba layers hold no per-token KV)."""
    per_token = ctx.fact("kv_bytes_per_token", scope)
    layers = ctx.sql(
        "SELECT full_attention_layers + coalesce(sliding_layers, 0) AS n FROM model_config "
        "WHERE full_attention_layers > 0 ORDER BY source_path LIMIT 1"
    )
    if per_token is None or not isinstance(per_token.value, int | float) or not layers.height:
        return None
    return float(per_token.value) / int(layers["n"][0])


def _mib(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB"
