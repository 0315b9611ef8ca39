"""A HuggingFace model's config.json: the architecture numbers that size its KV cache.

Recognised by content (a JSON object with a layer count), whatever the file is called, or
named with `kvdiag analyze --model-config PATH`. Multimodal configs keep the language model
in a nested `text_config` (or `llm_config`, `language_config`); it is flattened in. Per-layer
attention kinds come from `layer_types` when the config lists them, else from the family's
own switches (`sliding_window_pattern`, `hybrid_override_pattern`, `attn_layer_period` ...).
The launch-flags ingester reuses `model_config_row` for the config.json that the recording
harness embeds in launch.txt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from kvdiag.analyzer.ingest.base import Emit, IngestContext, Ingester, InputUnit, TableBatch, Tally
from kvdiag.analyzer.ingest.rows import (
    MAX_SMALL_FILE,
    as_int,
    clean_raw,
    count_lines,
    frame_for,
    load_json,
    read_text,
    undecodable_lines,
)
from kvdiag.domain.records.diagnosis import InputProblem

NESTED_KEYS = ("text_config", "llm_config", "language_config")
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_SNIFF = re.compile(r'"(?:num_hidden_layers|n_layer)"\s*:\s*\d')
_SNIFF_WEAK = re.compile(r'"(?:num_layers|n_layers)"\s*:\s*\d')  # ChatGLM-style, with model_type


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def _int(value: Any) -> int | None:
    """A JSON number as an integer (saturated past 64 bits); None for anything else."""
    return as_int(value) if isinstance(value, int | float) else None


def _text(value: Any) -> str | None:
    """A JSON value for a text column: strings as they are, anything else as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


# Per-layer lists are built for at most this many layers; a config claiming more is
# implausible (validate.py reports it) and gets no per-layer counts.
MAX_LAYERS = 1_000_000


def _language_part(cfg: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
    """The dict holding the language model's numbers, and the key it sat under."""
    if _first(cfg, *_LAYER_KEYS) is not None:
        return cfg, None
    for key in NESTED_KEYS:
        nested = cfg.get(key)
        if isinstance(nested, dict) and _first(nested, *_LAYER_KEYS) is not None:
            return nested, key
    return cfg, None


def _kv_heads(cfg: Mapping[str, Any], heads: int | None) -> int | None:
    explicit = _int(_first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv"))
    if explicit:
        return explicit
    if cfg.get("multi_query_attention") and _int(cfg.get("multi_query_group_num")):
        return _int(cfg["multi_query_group_num"])  # ChatGLM
    if cfg.get("multi_query") is True:
        return 1  # Falcon's original MQA switch
    return heads


def _head_dim(cfg: Mapping[str, Any], hidden: int | None, heads: int | None) -> int | None:
    explicit = _int(_first(cfg, "head_dim", "kv_channels"))
    if explicit:
        return explicit
    return hidden // heads if hidden and heads else None


_KIND_WORDS = (
    ("linear", ("linear", "mamba", "ssm", "conv", "recurrent", "deltanet")),
    ("sliding", ("sliding", "chunked", "local", "swa")),
)


def _kind_of(word: str) -> str:
    low = word.lower()
    for kind, words in _KIND_WORDS:
        if any(w in low for w in words):
            return kind
    return "full"


def layer_kinds(cfg: Mapping[str, Any], layers: int) -> list[str]:
    """Per-layer attention kind: "full", "sliding", "linear", or "none" (MLP-only layers)."""
    listed = _first(cfg, "layer_types", "layers_block_type")
    if isinstance(listed, list) and listed:
        return [_kind_of(str(t)) for t in listed]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:  # Nemotron-H: M mamba, * attention, - / E MLP
        return [{"M": "linear", "*": "full"}.get(c, "none") for c in pattern]
    period, offset = _int(cfg.get("attn_layer_period")), _int(cfg.get("attn_layer_offset"))
    if period:  # Jamba: attention every `period` layers, the rest Mamba
        return ["full" if i % period == (offset or 0) else "linear" for i in range(layers)]
    interval = _int(cfg.get("full_attention_interval"))
    if interval:  # Qwen3-Next style without layer_types: every interval-th layer is full
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    return _sliding_kinds(cfg, layers)


def _sliding_kinds(cfg: Mapping[str, Any], layers: int) -> list[str]:
    window = _int(cfg.get("sliding_window"))
    if not window or cfg.get("use_sliding_window") is False:
        return ["full"] * layers
    pattern = _int(cfg.get("sliding_window_pattern"))
    if pattern:  # Gemma 3 / Cohere 2: every pattern-th layer is global
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    if str(cfg.get("model_type", "")).startswith("gemma2"):  # alternating, local first
        return ["sliding" if i % 2 == 0 else "full" for i in range(layers)]
    first_windowed = _int(cfg.get("max_window_layers"))
    if cfg.get("use_sliding_window") is True and first_windowed is not None:  # Qwen2
        return ["sliding" if i >= first_windowed else "full" for i in range(layers)]
    return ["sliding"] * layers  # Mistral: one window on every layer


def model_config_row(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model_config columns a config.json gives, or None when it is not a model config."""
    lang, nested_key = _language_part(cfg)
    layers = _int(_first(lang, *_LAYER_KEYS))
    if not layers:
        return None
    heads = _int(_first(lang, "num_attention_heads", "n_head", "num_heads"))
    hidden = _int(_first(lang, "hidden_size", "n_embd", "d_model"))
    kinds = layer_kinds(lang, layers) if layers <= MAX_LAYERS else []
    archs = cfg.get("architectures") or lang.get("architectures") or [None]
    window = _int(lang.get("sliding_window")) if "sliding" in kinds else None
    listed = _first(lang, "layer_types", "layers_block_type")
    return {
        "architecture": _text(archs[0]) if isinstance(archs, list) and archs else None,
        "model_type": _text(_first(cfg, "model_type") or lang.get("model_type")),
        "num_layers": layers,
        "num_attention_heads": heads,
        "num_kv_heads": _kv_heads(lang, heads),
        "head_dim": _head_dim(lang, hidden, heads),
        "hidden_size": hidden,
        "dtype": _text(_first(lang, "dtype", "torch_dtype") or _first(cfg, "dtype", "torch_dtype")),
        "max_position_embeddings": _int(
            _first(lang, "max_position_embeddings", "n_positions", "seq_length")
        ),
        "sliding_window": window,
        "sliding_layers": kinds.count("sliding") if kinds else None,
        "full_attention_layers": kinds.count("full") if kinds else None,
        "linear_layers": kinds.count("linear") if kinds else None,
        "kv_lora_rank": _int(lang.get("kv_lora_rank")),
        "qk_rope_head_dim": _int(lang.get("qk_rope_head_dim")),
        "layer_types": json.dumps(listed) if isinstance(listed, list) else None,
        "text_config_key": nested_key,
    }


def key_line(lines: Sequence[str], row: Mapping[str, Any]) -> int:
    """0-based index of the line stating the layer count (inside text_config when nested)."""
    start = 0
    nested = row.get("text_config_key")
    if nested:
        start = next((i for i, t in enumerate(lines) if f'"{nested}"' in t), 0)
    for i in range(start, len(lines)):
        if any(f'"{k}"' in lines[i] for k in _LAYER_KEYS):
            return i
    return 0


def model_config_frame(
    row: Mapping[str, Any], rel: str, line_no: int, raw: str, replica: str, model_path: str | None
) -> pl.DataFrame:
    """One model_config row with provenance, typed like the declared table."""
    prov = {"source_path": rel, "source_line": line_no, "raw": clean_raw(raw)}
    return frame_for(
        "model_config", [{**row, **prov, "replica": replica, "model_path": model_path}]
    )


class ModelConfigIngester(Ingester):
    """Reads a HuggingFace config.json (any file name) into `model_config`."""

    kind = "model_config"
    description = "HuggingFace model config.json (layers, heads, head_dim, dtype, windows, MLA)"
    tables = ("model_config",)
    max_bytes = MAX_SMALL_FILE  # read whole into memory

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        stripped = head.lstrip()
        if not stripped.startswith("{"):
            return 0
        if not (_SNIFF.search(head) or (_SNIFF_WEAK.search(head) and '"model_type"' in head)):
            return 0
        # JSON Lines with layer counts would be odd; a config is one object over many lines.
        return 90 if "\n" in stripped.rstrip() or name.endswith(".json") else 60

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        for path, rel in zip(unit.files, unit.rels, strict=True):
            yield from self._one(path, rel, unit.replica)

    def _one(self, path: Path, rel: str, replica: str) -> Iterator[Emit]:
        small = read_text(path, MAX_SMALL_FILE)
        lines = small.text.split("\n")
        tally = Tally(total=count_lines(small.text))
        if small.broken:
            yield InputProblem(rel, None, small.broken)
        cfg, problem = load_json(small, MAX_SMALL_FILE)
        if problem is not None:
            yield InputProblem(rel, *problem)
        row = model_config_row(cfg) if isinstance(cfg, dict) else None
        if row is None:
            if isinstance(cfg, dict):
                yield InputProblem(rel, None, "JSON without a layer count: not a model config")
            tally.undecodable = undecodable_lines(small.text) if problem else 0
            tally.unmatched = tally.total - tally.undecodable
            yield tally.account(rel)
            return
        at = key_line(lines, row)
        yield TableBatch(
            "model_config", model_config_frame(row, rel, at + 1, lines[at], replica, None)
        )
        tally.parsed, tally.records = tally.total, 1
        yield tally.account(rel)


def model_config_unit(path: Path, root: Path, replica: str) -> InputUnit:
    """The unit for a config.json named with --model-config (it may lie outside the folder)."""
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = path.as_posix()
    return InputUnit("model_config", rel, (path,), (rel,), path.stat().st_size, replica)
