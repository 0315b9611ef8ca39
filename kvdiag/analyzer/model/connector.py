"""What vLLM's log says about its KV connector: which one, and the transfers that went wrong.

log_kv_connector holds the connector's start-up line (`Initializing NIXL Scheduler ...`,
`Initializing native LMCache connector`) and, in P/D disaggregation, the blocks a prefill
instance held for a decode worker that never read them until their lease expired (NIXL,
Mooncake), the transfers that failed (NIXL, MoRIIO: the decode side computes the prompt
again) and the stores the offloading connector's CPU tier refused. Each is a fact only
when its lines are there.
"""

from __future__ import annotations

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.model.offload import counted_increase
from kvdiag.analyzer.model.samples import SqlReader, samples
from kvdiag.domain.records.diagnosis import Fact

_NAMES = {
    "lmcache": "LMCache",
    "nixl": "NIXL",
    "mooncake": "Mooncake",
    "moriio": "MoRIIO",
    "offloading": "offloading",
}

_CONNECTOR = """
SELECT connector, source_path, source_line FROM log_kv_connector
WHERE connector IS NOT NULL ORDER BY (event = 'init') DESC, source_path, source_line LIMIT 1
"""

_COUNTS = """
SELECT event, count(*) AS n, count(DISTINCT request_id) AS requests, max(seconds) AS seconds,
       sum(blocks) AS blocks, string_agg(DISTINCT connector, ', ') AS connectors,
       min(source_path) AS source_path, min(source_line) AS source_line
FROM log_kv_connector
WHERE event IN ('blocks_expired', 'transfer_failed', 'store_failed')
GROUP BY event ORDER BY event
"""

_FACTS = {
    "blocks_expired": (
        "kv_blocks_expired",
        "requests whose KV blocks the prefill side held until the lease expired, unread",
    ),
    "transfer_failed": ("kv_transfer_failures", "requests whose KV transfer failed"),
    "store_failed": ("offload_store_refusals", "stores the offload tier refused (no room)"),
}


def connector_facts(reader: SqlReader, facts: Facts) -> None:
    """kv_connector, kv_blocks_expired, kv_transfer_failures, offload_store_refusals,
    prompt_tokens_recomputed."""
    _recomputed(reader, facts)
    named = reader.sql(_CONNECTOR)
    if named.is_empty():
        return
    row = named.row(0, named=True)
    name = _NAMES.get(str(row["connector"]), str(row["connector"]))
    facts["kv_connector"] = Fact(name, None, ref(row), "the KV connector vLLM's log names")
    for count in reader.sql(_COUNTS).iter_rows(named=True):
        key, what = _FACTS[count["event"]]
        note = f"{what} ({count['connectors']}; {count['n']:,} lines)"
        if count["seconds"] is not None:
            note += f"; timeout {count['seconds']:g} s"
        if count["blocks"] is not None:
            note += f"; {int(count['blocks']):,} blocks"
        facts[key] = Fact(int(count["requests"] or count["n"]), "requests", ref(count), note)


def _recomputed(reader: SqlReader, facts: Facts) -> None:
    """vllm:prompt_tokens_recomputed (0.19.1): cached tokens computed again, e.g. after a KV
    load from a connector failed; a fact only when some were."""
    counted = counted_increase(samples(reader, "prompt_tokens_recomputed", "total"), "")
    if counted is not None and counted.value > 0:
        note = f"cached prompt tokens computed again ({counted.note})"
        facts["prompt_tokens_recomputed"] = Fact(
            int(counted.value), "tokens", ref(counted.row), note
        )
