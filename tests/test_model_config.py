"""config.json: the real runs' model, published architectures, and --model-config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvdiag.analyzer.ingest.config.model_config import model_config_row
from kvdiag.analyzer.model.kv import layout_of
from kvdiag.domain import kvmath
from tests.conftest import FIXTURES, analyze_json
from tests.ingest_helpers import ingest, kind_of, write

LAUNCH = FIXTURES / "vllm-b-saturation" / "incident" / "launch.txt"


def embedded_config(launch: Path = LAUNCH) -> tuple[dict[str, Any], str]:
    """The config.json the harness printed under '# model config (...)', and its text."""
    text = launch.read_text()
    block = text.split("# model config (/opt/tinymodel/config.json)\n", 1)[1]
    body = block[: block.index("\n}\n") + 3]
    return json.loads(body), body


def test_a_config_json_is_recognised_by_content_whatever_its_name(tmp_path: Path) -> None:
    cfg, body = embedded_config()
    for name in ("config.json", "tinymodel.cfg", "model"):
        path = write(tmp_path, name, body)
        assert kind_of(path) == "model_config", name
    result = ingest(tmp_path / "model")
    assert result.account.lines_parsed == result.account.lines_total == body.count("\n")
    (row,) = result.table("model_config").to_dicts()
    assert row["num_layers"] == cfg["num_hidden_layers"] == 4
    assert row["num_attention_heads"] == cfg["num_attention_heads"]
    assert row["num_kv_heads"] == cfg["num_key_value_heads"] == 2
    assert row["head_dim"] == cfg["head_dim"] == 64
    assert row["dtype"] == cfg["dtype"] == "bfloat16"
    assert row["full_attention_layers"] == 4 and row["sliding_layers"] == 0
    assert body.splitlines()[row["source_line"] - 1].strip().startswith('"num_hidden_layers"')
    assert kvmath.kv_bytes_per_token(layout_of(row)) == 2048


def test_broken_json_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    _, body = embedded_config()
    result = ingest(write(tmp_path, "config.json", body[:-20]))
    assert result.account.lines_unmatched == result.account.lines_total
    assert "not valid JSON" in result.problems[0].message


# The keys that matter, as the published config.json files state them.
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "torch_dtype": "float16",
    "model_type": "llama",
}
LLAMA2_70B = LLAMA2_7B | {"hidden_size": 8192, "num_attention_heads": 64, "num_hidden_layers": 80}
LLAMA2_70B |= {"num_key_value_heads": 8}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "num_hidden_layers": 61,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [(LLAMA2_7B, 512 * 1024), (LLAMA2_70B, 320 * 1024), (DEEPSEEK_V3, 70_272)],
    ids=["llama2-7b", "llama2-70b", "deepseek-v3"],
)
def test_published_configs_give_the_documented_bytes_per_token(
    cfg: dict[str, Any], expected: int
) -> None:
    row = model_config_row(cfg)
    assert row is not None
    assert kvmath.kv_bytes_per_token(layout_of(row)) == expected


def test_heads_default_to_attention_heads_and_head_dim_to_hidden_over_heads() -> None:
    row = model_config_row(LLAMA2_7B)
    assert row is not None
    assert (row["num_kv_heads"], row["head_dim"]) == (32, 128)
    deepseek = model_config_row(DEEPSEEK_V3)
    assert deepseek is not None and deepseek["kv_lora_rank"] == 512


def test_nested_text_config_and_sliding_pattern() -> None:
    gemma3 = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 2560,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "num_hidden_layers": 34,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
        },
        "vision_config": {"num_hidden_layers": 27, "hidden_size": 1152},
    }
    row = model_config_row(gemma3)
    assert row is not None
    assert row["text_config_key"] == "text_config" and row["num_layers"] == 34
    assert (row["full_attention_layers"], row["sliding_layers"]) == (5, 29)
    assert row["sliding_window"] == 1024 and row["dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("cfg", "full", "sliding", "linear"),
    [
        ({"model_type": "mistral", "sliding_window": 4096}, 0, 8, 0),
        ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}, 8, 0, 0),
        ({"model_type": "gemma2", "sliding_window": 4096}, 4, 4, 0),
        ({"layer_types": ["linear_attention"] * 3 * 2 + ["full_attention"] * 2}, 2, 0, 6),
        ({"model_type": "jamba", "attn_layer_period": 8, "attn_layer_offset": 4}, 1, 0, 7),
        ({"full_attention_interval": 4}, 2, 0, 6),
        ({"hybrid_override_pattern": "M-M*-M-M"}, 1, 0, 4),
    ],
    ids=["mistral", "qwen2-off", "gemma2", "layer_types", "jamba", "qwen3-next", "nemotron-h"],
)
def test_layer_kinds(cfg: dict[str, Any], full: int, sliding: int, linear: int) -> None:
    base = {"num_hidden_layers": 8, "num_attention_heads": 8, "hidden_size": 1024}
    row = model_config_row(base | cfg)
    assert row is not None
    assert (row["full_attention_layers"], row["sliding_layers"], row["linear_layers"]) == (
        full,
        sliding,
        linear,
    )


def test_model_config_option_adds_a_config_from_outside_the_folder(tmp_path: Path) -> None:
    incident = tmp_path / "incident"
    incident.mkdir()
    for name in ("launch.txt", "server.log"):
        shutil.copy(LAUNCH.parent / name, incident / name)
    cfg, _ = embedded_config()
    outside = write(tmp_path, "other-model.json", json.dumps(cfg | {"num_key_value_heads": 4}))
    _, doc = analyze_json(incident, "--model-config", str(outside))
    fact = doc["facts"]["kv_bytes_per_token"]
    assert fact["value"] == 4096  # the given file wins over the copy inside launch.txt
    assert fact["source"]["path"] == outside.as_posix()
    assert "2 x 4 layers x 4 kv_heads x 64 head_dim x 2 bytes" in fact["note"]
    kinds = {r["path"]: r["kind"] for r in doc["inputs"]}
    assert kinds[outside.as_posix()] == "model_config"
    _, without = analyze_json(incident)
    assert without["facts"]["kv_bytes_per_token"]["value"] == 2048
