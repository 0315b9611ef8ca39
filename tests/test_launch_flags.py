"""Launch records: the real runs' launch.txt, and the command-line forms users save."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvdiag.analyzer.ingest.config.cmdline import non_default_args
from kvdiag.analyzer.model.effective import EngineContext
from kvdiag.analyzer.model.kv import layout_of
from kvdiag.analyzer.model.settings import setting
from kvdiag.domain import kvmath
from kvdiag.domain.settings import human_int
from kvdiag.domain.units import GIB
from tests.conftest import FIXTURES, fixture_cases
from tests.ingest_helpers import Ingested, ingest, kind_of, write

# The recording harness's launch records of the real runs (assembled fixtures imitate
# the header but not the rest).
LAUNCHES = sorted(
    p
    for case in fixture_cases()
    if str(case.expected.get("provenance", "")).startswith("real")
    for p in case.incident.glob("**/launch.txt")
)
IDS = [p.relative_to(FIXTURES).parent.as_posix() for p in LAUNCHES]


def _config(result: Ingested) -> dict[str, str]:
    rows = result.table("config").to_dicts()
    return {r["key"]: r["value"] for r in rows}


@pytest.mark.parametrize("path", LAUNCHES, ids=IDS)
def test_every_fixture_launch_record_is_fully_read(path: Path) -> None:
    assert kind_of(path) == "launch_flags"
    result = ingest(path)
    acct = result.account
    assert acct.lines_parsed == acct.lines_total == len(path.read_text().splitlines())
    cfg = _config(result)
    command = path.read_text().splitlines()[2]  # the exact command line, as the harness wrote it
    assert cfg["max_model_len"] == re.search(r"--max-model-len (\d+)", command).group(1)
    size = re.search(r"--kv-cache-memory-bytes (\d+)M", command)
    if size:
        assert cfg["kv_cache_memory_bytes"] == str(int(size.group(1)) * 2**20)
    assert (cfg["engine_version"], cfg["device"], cfg["model"]) == (
        "0.32.0",
        "cpu",
        "/opt/tinymodel",
    )
    rows = result.table("config")
    assert set(rows["origin"]) == {"cmdline"} and set(rows["engine"]) == {"vllm"}
    (model,) = result.table("model_config").to_dicts()
    assert (model["num_layers"], model["num_kv_heads"], model["head_dim"]) == (4, 2, 64)
    assert model["model_path"] == "/opt/tinymodel/config.json"
    assert (
        path.read_text()
        .splitlines()[model["source_line"] - 1]
        .strip()
        .startswith('"num_hidden_layers"')
    )


def test_b_saturation_flags_with_their_lines() -> None:
    result = ingest(FIXTURES / "vllm-b-saturation" / "incident" / "launch.txt")
    rows = {r["key"]: r for r in result.table("config").to_dicts()}
    assert rows["max_model_len"]["value"] == "4096"
    assert rows["kv_cache_memory_bytes"]["value"] == "17825792"  # 17M, binary suffix
    assert rows["kv_cache_memory_bytes"]["source_line"] == 3
    assert "--kv-cache-memory-bytes 17M" in rows["kv_cache_memory_bytes"]["raw"]


def test_prefix_caching_switches_and_the_cpu_kv_space_variable() -> None:
    def flags(name: str) -> dict[str, str]:
        return _config(ingest(FIXTURES / name / "incident" / "launch.txt"))

    assert flags("vllm-c-prefill-peak-noprefix")["enable_prefix_caching"] == "False"
    assert flags("vllm-c2-prefill-peak-prefix")["enable_prefix_caching"] == "True"
    assert "enable_prefix_caching" not in flags("vllm-b-saturation")
    healthy = ingest(FIXTURES / "vllm-a-healthy" / "incident" / "launch.txt")
    (space,) = healthy.table("config").filter(key="VLLM_CPU_KVCACHE_SPACE").to_dicts()
    assert space["value"] == "1" and space["source_line"] == 2  # the first statement of it


_POOL_LINE = re.compile(r"KV cache size: ([\d,]+) tokens")
_ESTIMATE = re.compile(r"estimated maximum model length is (\d+)")


@pytest.mark.parametrize("path", LAUNCHES, ids=IDS)
def test_pool_from_flags_and_config_agrees_with_the_server_log(path: Path) -> None:
    """Flags + config.json + the CPU default block size give the pool the engine printed."""
    result = ingest(path)
    rows = result.table("config").to_dicts()
    cfg = _config(result)
    ctx = EngineContext(version=cfg["engine_version"], device=cfg["device"])
    block = setting("block_size", rows, "default", ctx)
    assert block is not None
    explicit = re.search(r"--block-size (\d+)", path.read_text().splitlines()[2])
    if explicit:
        assert block.source == "cmdline" and block.value == explicit.group(1)
    else:
        assert block.is_default and block.value == "128"
    (model,) = result.table("model_config").to_dicts()
    per_token = kvmath.kv_bytes_per_token(layout_of(model))
    if "kv_cache_memory_bytes" in cfg:
        pool_bytes = int(cfg["kv_cache_memory_bytes"])
    else:
        pool_bytes = int(cfg["VLLM_CPU_KVCACHE_SPACE"]) * GIB
    tokens = kvmath.pool_tokens_from_bytes(pool_bytes, per_token, int(block.value))
    log = (path.parent / "server.log").read_text()
    printed = _POOL_LINE.search(log)
    if printed:
        assert tokens == int(printed.group(1).replace(",", ""))
    else:  # the refused start: one block is vLLM's null block, the rest is the estimate
        assert tokens - int(block.value) == int(_ESTIMATE.search(log).group(1))


def test_human_readable_ints_as_vllm_reads_them() -> None:
    assert human_int("17M") == 17_825_792
    assert human_int("1K") == 1024
    assert human_int("25.6k") == 25_600
    assert human_int("2g") == 2_000_000_000
    assert human_int("4096") == 4096
    with pytest.raises(ValueError):
        human_int("1.5M")


def test_openai_api_server_command_across_lines_with_env(tmp_path: Path) -> None:
    text = (
        "CUDA_VISIBLE_DEVICES=0,1,2,3 VLLM_USE_V1=1 \\\n"
        "python3 -m vllm.entrypoints.openai.api_server \\\n"
        "    --model meta-llama/Llama-2-70b-hf --tensor_parallel_size=4 -pp 2 \\\n"
        "    --gpu-memory-utilization 0.95 --max-num-seqs 24 --enable-prefix-caching \\\n"
        "    --kv-cache-dtype fp8 --swap-space 8 --num-gpu-blocks-override 2000 \\\n"
        "    --max-num-batched-tokens 8k --block-size 32 --enable-chunked-prefill \\\n"
        '    --kv-transfer-config \'{"kv_connector": "X",\n'
        '      "kv_role": "kv_both"}\' --port 8000 2>&1 | tee server.log\n'
    )
    path = write(tmp_path, "cmdline", text)
    assert kind_of(path) == "launch_flags"
    result = ingest(path)
    assert result.account.lines_parsed == result.account.lines_total == 8
    cfg = _config(result)
    assert cfg == cfg | {
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "VLLM_USE_V1": "1",
        "model": "meta-llama/Llama-2-70b-hf",
        "tensor_parallel_size": "4",
        "pipeline_parallel_size": "2",
        "gpu_memory_utilization": "0.95",
        "max_num_seqs": "24",
        "enable_prefix_caching": "True",
        "kv_cache_dtype": "fp8",
        "swap_space": "8.0",
        "num_gpu_blocks_override": "2000",
        "max_num_batched_tokens": "8000",
        "block_size": "32",
        "enable_chunked_prefill": "True",
        "port": "8000",
    }
    assert json.loads(cfg["kv_transfer_config"]) == {"kv_connector": "X", "kv_role": "kv_both"}
    lines = {r["key"]: r["source_line"] for r in result.table("config").to_dicts()}
    assert (lines["VLLM_USE_V1"], lines["tensor_parallel_size"], lines["block_size"]) == (1, 3, 6)


def test_vllm_serve_with_negated_switch_and_old_flag_spelling(tmp_path: Path) -> None:
    text = "vllm serve Qwen/Qwen3-8B --kv-cache-memory=2G --no-enable-prefix-caching -tp 2\n"
    cfg = _config(ingest(write(tmp_path, "serve.sh", text)))
    assert cfg["model"] == "Qwen/Qwen3-8B"
    assert cfg["kv_cache_memory_bytes"] == str(2 * 2**30)
    assert cfg["enable_prefix_caching"] == "False"
    assert cfg["tensor_parallel_size"] == "2"


def test_sglang_launch_server(tmp_path: Path) -> None:
    text = (
        "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --tp 2 "
        "--mem-fraction-static 0.85 --context-length 32768 --page-size 16 "
        "--chunked-prefill-size 4096 --max-running-requests 64 --disable-radix-cache "
        "--port 30000\n"
    )
    result = ingest(write(tmp_path, "launch.sh", text))
    cfg = _config(result)
    assert cfg == cfg | {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "tp_size": "2",
        "mem_fraction_static": "0.85",
        "context_length": "32768",
        "page_size": "16",
        "chunked_prefill_size": "4096",
        "max_running_requests": "64",
        "disable_radix_cache": "True",
    }
    assert set(result.table("config")["engine"]) == {"sglang"}
    rows = result.table("config").to_dicts()
    ctx = EngineContext(engine="sglang")
    tp = setting("tensor_parallel_size", rows, "default", ctx)
    prefix = setting("enable_prefix_caching", rows, "default", ctx)
    assert tp is not None and tp.value == "2" and tp.note == "stated as tp_size"
    assert prefix is not None and prefix.value == "False"


def test_script_lines_that_are_not_the_server_are_counted_unmatched(tmp_path: Path) -> None:
    text = (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        "export VLLM_CPU_KVCACHE_SPACE=40\n"
        "source /opt/venv/bin/activate\n"
        "\n"
        "vllm serve /models/llama --max-model-len 8192\n"
    )
    result = ingest(write(tmp_path, "run.sh", text))
    assert (result.account.lines_parsed, result.account.lines_unmatched) == (4, 2)
    assert _config(result) == {
        "VLLM_CPU_KVCACHE_SPACE": "40",
        "model": "/models/llama",
        "max_model_len": "8192",
    }


def test_argument_lists_json_argv_and_proc_cmdline(tmp_path: Path) -> None:
    args = write(tmp_path, "args", "--max-model-len 8192\n--gpu-memory-utilization 0.85\n")
    assert kind_of(args) == "launch_flags"
    assert _config(ingest(args)) == {"max_model_len": "8192", "gpu_memory_utilization": "0.85"}
    argv = write(tmp_path, "args.json", json.dumps(["vllm", "serve", "m", "--block-size", "16"]))
    assert _config(ingest(argv)) == {"model": "m", "block_size": "16"}
    proc = tmp_path / "cmdline"
    proc.write_bytes(
        b"/usr/bin/python3\x00-m\x00vllm.entrypoints.openai.api_server\x00--max-num-seqs\x0032\x00"
    )
    assert _config(ingest(proc, kind="launch_flags")) == {"max_num_seqs": "32"}


def test_non_default_args_line_of_the_real_log() -> None:
    log = (FIXTURES / "vllm-b-saturation" / "incident" / "server.log").read_text()
    line = next(t for t in log.splitlines() if "non-default args:" in t)
    args = dict(non_default_args(line.split("non-default args:", 1)[1]))
    assert args["max_model_len"] == "4096"
    assert args["kv_cache_memory_bytes"] == "17825792"
    assert args["model"] == "/opt/tinymodel"
    assert non_default_args("{'unterminated': ") == []
