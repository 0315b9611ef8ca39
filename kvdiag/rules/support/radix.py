"""SGLang's radix cache in layer 2: the tokens its usage percentage leaves out.

SGLang's `token usage` is used / pool, where used = pool - (available + evictable): prefixes
the radix cache keeps for reuse, held by no running request, count as free because they are
evicted on demand. The pool physically holds them all the same. Where the metrics give the
three counts (kv_used_tokens, kv_available_tokens, kv_evictable_tokens, SGLang 0.5.12+), the
payload layer adds the evictable tokens back and shows what the pool holds beside what the
percentage says.
"""

from __future__ import annotations

import polars as pl

from kvdiag.domain.records.diagnosis import Comparison
from kvdiag.rules.base import RuleContext

_COUNTS = """
WITH g AS (
    SELECT replica, engine, ts, metric, value, source_path, source_line, raw
    FROM metric_samples
    WHERE suffix = '' AND metric IN ('kv_used_tokens', 'kv_available_tokens', 'kv_evictable_tokens')
)
SELECT e.replica, e.ts, u.value AS used, a.value AS available, e.value AS evictable,
       e.source_path, e.source_line, e.raw
FROM g e
JOIN g u ON u.metric = 'kv_used_tokens' AND u.replica = e.replica
    AND u.engine IS NOT DISTINCT FROM e.engine AND u.ts IS NOT DISTINCT FROM e.ts
JOIN g a ON a.metric = 'kv_available_tokens' AND a.replica = e.replica
    AND a.engine IS NOT DISTINCT FROM e.engine AND a.ts IS NOT DISTINCT FROM e.ts
WHERE e.metric = 'kv_evictable_tokens' AND u.value + a.value + e.value > 0
QUALIFY row_number() OVER (
    PARTITION BY e.replica
    ORDER BY e.value / (u.value + a.value + e.value) DESC, e.ts, e.source_path, e.source_line
) = 1
ORDER BY e.value / (u.value + a.value + e.value) DESC, e.ts, e.source_path, e.source_line
"""


def evictable_added_back(ctx: RuleContext, scope: str | None) -> Comparison | None:
    """The pool's occupancy with the evictable radix cache, at the scrape where it held most
    (of the replica's scrapes, or of all when `scope` is None)."""
    # One query for the whole fleet (each replica's row), not a scan per replica.
    rows = ctx.memo(("radix_counts",), lambda: ctx.sql(_COUNTS))
    if scope:
        rows = rows.filter(pl.col("replica") == scope)
    if rows.is_empty():
        return None
    r = rows.row(0, named=True)
    pool = r["used"] + r["available"] + r["evictable"]
    tag = f" [{scope}]" if scope else ""
    return ctx.compare(
        f"KV pool held, evictable radix cache added back{tag}",
        round(r["used"] / pool, 4),
        round((r["used"] + r["evictable"]) / pool, 4),
        "ratio",
        [ctx.evidence(r, "kv_evictable_tokens", r["evictable"])],
        f"expected: SGLang's token usage ({r['used']:,.0f} used of {pool:,.0f}), which leaves "
        f"out {r['evictable']:,.0f} evictable radix-cache tokens; they are freed on demand, "
        "so they are room, not load",
    )
