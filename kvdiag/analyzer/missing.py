"""Name the evidence an incident folder lacks, and what each piece would have decided."""

from __future__ import annotations

from kvdiag.analyzer.model import MissingEvidence
from kvdiag.analyzer.store import StoreReader

# (input kinds any of which supplies it, what is missing, what it would have decided)
EXPECTED_INPUTS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("vllm_log", "sglang_log"),
        "no server log",
        "start-up pool sizing, memory profiling and capacity errors; the engine's own stats lines",
    ),
    (
        ("prom_text", "prom_api_json", "grafana_csv"),
        "no /metrics scrapes",
        "usage, waiting and preemptions between stats lines "
        "(vLLM 0.32 shows preemptions only there)",
    ),
    (
        ("nvidia_smi", "dcgm"),
        "no nvidia-smi or dcgm snapshot",
        "layer 1 could not compare the pool with the card's total, used and free memory per GPU",
    ),
    (
        ("model_config",),
        "no model config.json",
        "KV bytes per token could not be computed from the model's layers and KV heads",
    ),
)


def missing_evidence(reader: StoreReader) -> tuple[MissingEvidence, ...]:
    """What the folder lacks among the inputs a full analysis uses."""
    kinds = set(
        reader.sql("SELECT DISTINCT kind FROM inputs WHERE status = 'used'")["kind"].to_list()
    )
    if reader.count("model_config"):  # also embedded in a launch record
        kinds.add("model_config")
    out = [
        MissingEvidence(what, decides)
        for supply, what, decides in EXPECTED_INPUTS
        if not kinds & set(supply)
    ]
    if (
        kinds
        and reader.count("log_kv_pool") == 0
        and not reader.scalar(
            "SELECT count(*) FROM config WHERE key IN ('num_gpu_blocks', 'kv_cache_size_tokens')"
        )
    ):
        out.append(
            MissingEvidence(
                "no pool size (start-up pool line or cache_config_info)",
                "layers 1 and 3: the size the demand is held against",
            )
        )
    return tuple(out)
