"""Engine identity facts: which engine, and which device its KV pool lives on.

A Dynamo folder is a fleet: the `fleet_engine` fact says "dynamo" and `engine` stays the
workers' engine (vLLM, SGLang), so every rule keeps speaking that engine's words.

A folder may hold more than one engine (vLLM and SGLang run on the same hardware to compare
their pools): the `engine` fact is then one fact per engine, scoped by engine and citing the
first input that shows it, and the facts that differ per engine carry the same scope.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.model.reads import Reads
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain.records.diagnosis import Fact, SourceRef

# The engine that wrote a log row: the kind of the input its file was read as.
ENGINE_OF_INPUT = "nullif(regexp_extract(kind, '^(vllm|sglang|tgi|trtllm)_log$', 1), '')"
_ENGINE_QUERIES = (
    # (engine, first file) from each kind of input: server logs, metric names, launch records
    f"SELECT {ENGINE_OF_INPUT} AS e, min(path) AS p FROM inputs WHERE status = 'used' GROUP BY e",
    # vLLM and SGLang prefix their metrics `vllm:` / `sglang:` (Ray: `ray_vllm_`); TGI's router
    # and TensorRT-LLM's collector name them `tgi_` / `trtllm_`
    "SELECT nullif(rtrim(regexp_extract(name, '^(?:ray_)?(vllm[:_]|sglang:|tgi_|trtllm_)', 1), "
    "':_'), '') AS e, "
    "min(source_path) AS p FROM metric_samples GROUP BY e",
    "SELECT engine AS e, min(source_path) AS p FROM config GROUP BY e",
)
_ENGINE_TABLES = ("inputs", "metric_samples", "config")  # what each query reads


def engines(reader: StoreReader) -> dict[str, SourceRef]:
    """Every engine the inputs show, with the first file that shows it (logs first)."""
    found: dict[str, SourceRef] = {}
    for query, table in zip(_ENGINE_QUERIES, _ENGINE_TABLES, strict=True):
        if not reader.has_rows(table):  # known empty: no query
            continue
        for engine, path in sorted(reader.sql(query).iter_rows(), key=lambda r: str(r[1])):
            if engine and engine not in found:
                found[str(engine)] = SourceRef(str(path))
    return found


# A fleet served through NVIDIA Dynamo: its frontend, router, workers and KV block manager
# expose `dynamo_*` and `kvbm_*` families. Dynamo is not the engine: each worker runs vLLM,
# SGLang or TensorRT-LLM, whose words the rules keep (the `engine` fact and the replica's own).
_FLEET_QUERY = (
    "SELECT min(source_path) FROM metric_samples "
    "WHERE starts_with(name, 'dynamo_') OR starts_with(name, 'kvbm_')"
)


def fleet_engine(reader: StoreReader) -> SourceRef | None:
    """The first file showing the folder is a Dynamo fleet, if it is one."""
    path = reader.scalar(_FLEET_QUERY)
    return SourceRef(str(path)) if path else None


def engine_facts(reader: StoreReader, facts: Facts) -> None:
    if (fleet := fleet_engine(reader)) is not None:
        note = "NVIDIA Dynamo frontend and workers; each worker's engine is the engine fact"
        facts["fleet_engine"] = Fact("dynamo", None, fleet, note)
    found = engines(reader)
    if len(found) == 1:
        facts["engine"] = Fact(next(iter(found)), None, None)
    elif found:
        facts["engine"] = tuple(
            Fact(name, None, source, None, (("engine", name),))
            for name, source in sorted(found.items())
        )


def engine_of_replica(
    reader: Reads, facts: Mapping[str, Fact | tuple[Fact, ...]], replica: str
) -> str | None:
    """The engine one replica ran: the folder's only engine, else its own logs' engine
    (None when the replica's logs are of two engines, or it has none)."""
    fact = facts.get("engine")
    if isinstance(fact, Fact):
        return str(fact.value)
    tables = ("log_kv_pool", "log_stats", "log_engine", "log_memory", "log_preemptions")
    paths = " UNION ".join(f"SELECT source_path FROM {t} WHERE replica = ?" for t in tables)
    found = reader.sql(
        f"SELECT DISTINCT {ENGINE_OF_INPUT} AS e FROM inputs WHERE path IN ({paths})",
        [replica] * len(tables),
    )["e"].drop_nulls()
    return str(found[0]) if found.len() == 1 else None


_DEVICE_SOURCES = (
    # table, column, how it names the device
    ("log_kv_pool", "device"),
    ("log_stats", "kv_device"),
    ("log_engine", "device"),
)


def device_facts(reader: StoreReader, facts: Facts) -> None:
    """The KV pool's device as the log names it (CPU runs: layer 1 compares with node memory)."""
    for table, column in _DEVICE_SOURCES:
        if not reader.has_rows(table):
            continue
        rows = reader.sql(
            f"SELECT *, upper({column}) AS _dev FROM {table} WHERE {column} IS NOT NULL "
            "ORDER BY source_path, source_line LIMIT 1"
        )
        if rows.height:
            row = rows.row(0, named=True)
            device = "GPU" if row["_dev"] == "CUDA" else str(row["_dev"])
            facts["kv_device"] = Fact(device, None, ref(row), f"from {table}.{column}")
            return
