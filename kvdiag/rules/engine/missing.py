"""Name the evidence an incident folder lacks, and what each piece would have decided."""

from __future__ import annotations

from kvdiag.analyzer.model.reads import Reads
from kvdiag.domain.records.diagnosis import MissingEvidence

SERVER_LOGS = ("vllm_log", "sglang_log", "tgi_log", "trtllm_log")
# (input kinds any of which supplies it, what is missing, what it would have decided, layers)
EXPECTED_INPUTS: tuple[tuple[tuple[str, ...], str, str, tuple[int, ...]], ...] = (
    (
        SERVER_LOGS,
        "no server log",
        "start-up pool sizing, memory profiling and capacity errors; the engine's own stats lines",
        (1, 3),
    ),
    (
        ("prom_text", "prom_api", "grafana_csv", "trtllm_stats"),
        "no /metrics scrapes",
        "usage, waiting and preemptions between stats lines "
        "(vLLM 0.32 shows preemptions only there); request lengths for layers 2 and 3",
        (2, 3),
    ),
    (
        ("nvidia_smi", "dcgm"),
        "no nvidia-smi or dcgm snapshot",
        "layer 1 could not compare the pool with the card's total, used and free memory per GPU",
        (1,),
    ),
    (
        ("model_config",),
        "no model config.json",
        "KV bytes per token could not be computed from the model's layers and KV heads",
        (1,),
    ),
)
# What the same missing input would have decided for another engine's server, where it differs.
_ENGINE_DECIDES = {
    "sglang_log": {
        "no /metrics scrapes": "usage, queue and running between decode lines; the radix "
        "cache's evictable tokens, which SGLang's token usage counts as free (layer 2)",
    },
    "tgi_log": {
        "no /metrics scrapes": "the router's queue and batch size over time (TGI logs no "
        "periodic stats line); request lengths for layers 2 and 3",
    },
    "trtllm_log": {
        "no /metrics scrapes": "used and free KV blocks, active and queued requests per "
        "iteration (trtllm-serve's /metrics); request lengths for layers 2 and 3",
    },
}
_NO_POOL = "no pool size (start-up pool line, cache_config_info or SGLang's pool gauge)"
_LAYERS = {what: layers for _, what, _, layers in EXPECTED_INPUTS} | {_NO_POOL: (1, 3)}


def affected_layers(item: MissingEvidence) -> tuple[int, ...]:
    """The reconciliation layers a missing piece of evidence weakens."""
    return _LAYERS.get(item.what, ())


def on_cpu(reader: Reads) -> bool:
    """The engine ran on the CPU backend: GPU snapshots do not apply to its pool."""
    return bool(
        reader.scalar(
            "SELECT (SELECT count(*) FROM log_kv_pool WHERE upper(device) = 'CPU') "
            "+ (SELECT count(*) FROM log_stats WHERE upper(kv_device) = 'CPU') "
            "+ (SELECT count(*) FROM log_engine WHERE lower(device) = 'cpu')"
        )
    )


def missing_evidence(reader: Reads) -> tuple[MissingEvidence, ...]:
    """What the folder lacks among the inputs a full analysis uses."""
    kinds = set(
        reader.sql("SELECT DISTINCT kind FROM inputs WHERE status = 'used'")["kind"].to_list()
    )
    # Tables that arrive through other inputs: a config.json embedded in a launch record,
    # GPU snapshots from dcgm-exporter series inside /metrics scrapes.
    if reader.has_rows("model_config"):
        kinds.add("model_config")
    if reader.has_rows("gpu_snapshots"):
        kinds.add("dcgm")
    cpu = on_cpu(reader)
    logs = kinds & set(SERVER_LOGS)
    own = _ENGINE_DECIDES.get(next(iter(logs)), {}) if len(logs) == 1 else {}
    out = [
        MissingEvidence(what, own.get(what, decides))
        for supply, what, decides, _ in EXPECTED_INPUTS
        if not kinds & set(supply) and not (cpu and "nvidia_smi" in supply)
    ]
    if kinds and not _pool_stated(reader):
        out.append(MissingEvidence(_NO_POOL, "layers 1 and 3: the size the demand is held against"))
    return tuple(out)


def _pool_stated(reader: Reads) -> bool:
    """A pool size is somewhere: a log pool line, vLLM's cache config, SGLang's pool gauge."""
    return bool(
        reader.has_rows("log_kv_pool")
        or reader.scalar(
            "SELECT count(*) FROM config WHERE key IN ('num_gpu_blocks', 'kv_cache_size_tokens')"
        )
        or reader.scalar("SELECT count(*) FROM metric_samples WHERE metric = 'kv_pool_tokens'")
    )
