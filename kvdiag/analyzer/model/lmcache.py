"""LMCache's own account of its KV tier: what it stored, what it was asked for, what it found.

LMCache runs inside vLLM as its KV connector (LMCacheConnectorV1). It counts in tokens,
in its own families (metric_aliases.toml's LMCache section, lmcache/observability.py): the
prompt tokens its lookups were asked for (`lmcache:num_lookup_tokens`, multi-process
`lmcache_mp_lookup_requested_tokens`), those found (`lmcache:num_lookup_hits`,
`lmcache_mp_lookup_hit_tokens`) and the tokens stored (`lmcache:num_stored_tokens`). Its log
lines in vLLM's server log say the same per request (log_kv_connector: `LMCache hit
tokens: H`, `Stored N out of total M tokens`); they stand in when no LMCache metric was
scraped, so a log alone still shows a tier that stores and never hits.

vLLM's own `external_prefix_cache_*` counters (facts/offload.py) count the same lookups
from vLLM's side; these facts keep LMCache's words so a finding can name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.model.offload import Counted, counted_increase
from kvdiag.analyzer.model.samples import SqlReader, samples
from kvdiag.domain.records.diagnosis import Fact

CONNECTOR = "LMCache"


@dataclass(frozen=True, slots=True)
class ConnectorTier:
    """A KV connector's tier in its own numbers (tokens), from its metrics or its log."""

    connector: str
    origin: str  # "metrics" | "log": where the numbers were read
    stored_tokens: Counted | None
    lookup_tokens: Counted | None
    hit_tokens: Counted | None
    # Multi-process LMCache counts store transfers, not tokens: the stores it completed.
    store_requests: Counted | None = None

    @property
    def hit_rate(self) -> float | None:
        if self.lookup_tokens is None or not self.lookup_tokens.value:
            return None
        hits = self.hit_tokens.value if self.hit_tokens is not None else 0.0
        return hits / self.lookup_tokens.value


def lmcache_tier(reader: SqlReader) -> ConnectorTier | None:
    """LMCache's tier over the window: its metrics when scraped, else its log lines."""
    stored = counted_increase(samples(reader, "lmcache_stored_tokens", "total"), "")
    lookups = counted_increase(samples(reader, "lmcache_lookup_tokens", "total"), "")
    hits = counted_increase(samples(reader, "lmcache_lookup_hit_tokens", "total"), "")
    stores = counted_increase(samples(reader, "lmcache_store_requests", "total"), "")
    if stored is not None or lookups is not None:
        return ConnectorTier(CONNECTOR, "metrics", stored, lookups, hits, stores)
    return _from_log(reader)


# A lookup still running prints `LMCache hit tokens: None.` and is looked up again: only
# finished lookups count. Each process sums its own lines; with tensor parallelism every
# worker rank prints its stores, so the busiest process stands for the tier (the ranks
# store the same tokens).
_LOG_SUMS = """
SELECT process, count(*) AS n, sum({col}) AS total, max(source_line) AS last_line,
       arg_max(source_path, source_line) AS source_path, arg_max(raw, source_line) AS raw
FROM log_kv_connector WHERE connector = 'lmcache' AND event = ? AND {col} IS NOT NULL
  AND (event <> 'lookup' OR hit_tokens IS NOT NULL)
GROUP BY process ORDER BY total DESC, process LIMIT 1
"""


def _log_sum(reader: SqlReader, event: str, col: str, what: str) -> Counted | None:
    frame = reader.sql(_LOG_SUMS.format(col=col), [event])
    if frame.is_empty() or not frame["n"][0]:
        return None
    row: dict[str, Any] = frame.row(0, named=True)
    row["source_line"] = row.pop("last_line")
    lines = int(row["n"])
    note = f"sum of {what} over {lines:,} LMCache log line{'s' if lines > 1 else ''}"
    return Counted(float(row["total"] or 0), row, note)


_LAST_LINE = """
SELECT * FROM log_kv_connector WHERE connector = 'lmcache' AND event = ?
ORDER BY source_path, source_line DESC LIMIT 1
"""


def last_log_line(reader: SqlReader, event: str) -> dict[str, Any] | None:
    """LMCache's last log line of one event (lookup, stored ...), to quote beside metrics."""
    frame = reader.sql(_LAST_LINE, [event])
    return frame.row(0, named=True) if frame.height else None


def _from_log(reader: SqlReader) -> ConnectorTier | None:
    stored = _log_sum(reader, "stored", "stored_tokens", "'Stored N'")
    if stored is None:
        stored = _log_sum(reader, "store_start", "stored_tokens", "'Storing KV cache for N'")
    lookups = _log_sum(reader, "lookup", "tokens", "'Total tokens N'")
    hits = _log_sum(reader, "lookup", "hit_tokens", "'LMCache hit tokens: N'")
    if stored is None and lookups is None:
        return None
    return ConnectorTier(CONNECTOR, "log", stored, lookups, hits)


def lmcache_facts(reader: SqlReader, facts: Facts) -> None:
    """lmcache_stored_tokens, lmcache_lookup_tokens, lmcache_hit_tokens, lmcache_hit_rate:
    only when LMCache's metrics were scraped or its lines are in the log."""
    tier = lmcache_tier(reader)
    if tier is None:
        return
    for name, counted in (
        ("lmcache_stored_tokens", tier.stored_tokens),
        ("lmcache_lookup_tokens", tier.lookup_tokens),
        ("lmcache_hit_tokens", tier.hit_tokens),
    ):
        if counted is not None:
            facts[name] = Fact(int(counted.value), "tokens", ref(counted.row), counted.note)
    rate = tier.hit_rate
    if rate is not None and tier.lookup_tokens is not None:
        facts["lmcache_hit_rate"] = Fact(
            round(rate, 4),
            "ratio",
            ref(tier.lookup_tokens.row),
            f"LMCache's hit tokens / lookup tokens over the window (from its {tier.origin})",
        )
