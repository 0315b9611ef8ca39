"""Every backend's start-up refusal (and every out-of-memory of its own) reaches a class.

Issue 28, part 4: "A start-up refusal in any backend's wording is `memory_overcommit` or
`unservable_config` with its numbers." Each case below is one wording, analysed alone as a
ticket would paste it: the real fragments under ../shared/realdata/issues where one exists,
the CPU refusal recorded in fixtures/vllm-e-startup-refusal, and otherwise the line built
from the engine's format string (the catalogue's sample, numbers made plausible). The
oracle is the text itself: the class a reader names from the wording, and the numbers it
prints, which the finding must repeat.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvdiag.analyzer.model.quantities.refusals import advised_changes
from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from tests.conftest import ROOT, shared

OVERCOMMIT, UNSERVABLE = "memory_overcommit", "unservable_config"


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    text: str  # a line (or a file under ../shared/realdata/issues: 'issues/NAME')
    primary: str
    says: tuple[str, ...]  # what the finding or its remedies must state


def _fixture_line(fixture: str, marker: str) -> str:
    log = ROOT / "fixtures" / fixture / "incident" / "server.log"
    return next(ln for ln in log.read_text().splitlines() if marker in ln)


CASES = (
    # vLLM, CUDA (real pastes)
    Case(
        "v1-maxlen-0.8",
        "issues/vllm-v1-startup-maxlen-error-1.log",
        UNSERVABLE,
        ("1,048,576", "24.0 GiB needed", "9.97 GiB available", "--max-model-len"),
    ),
    Case(
        "v1-maxlen-tpu-estimate",
        "issues/vllm-v1-startup-maxlen-error-estimated-2.log",
        UNSERVABLE,
        ("131,072", "5,632"),
    ),
    Case(
        "v1-maxlen-fp8", "issues/vllm-v1-startup-maxlen-error-fp8-3.log", UNSERVABLE, ("122,080",)
    ),
    Case("torch-oom-legacy", "issues/vllm-oom-torch-legacy-1.log", OVERCOMMIT, ("1.63 GiB",)),
    Case("torch-oom-2.1", "issues/vllm-oom-torch21-2.log", OVERCOMMIT, ("3.50 GiB", "20.57 GiB")),
    # vLLM, CPU (recorded) and CPU wordings from the source
    Case(
        "cpu-maxlen-recorded",
        _fixture_line("vllm-e-startup-refusal", "[core.py:1510] ValueError: To serve"),
        UNSERVABLE,
        ("4,096", "1,920"),
    ),
    Case(
        "cpu-node-below-utilization",
        "Available memory on node 0 (8.62/9.96 GiB) on startup is less than desired CPU memory "
        "utilization (0.92, 9.17 GiB)",
        OVERCOMMIT,
        ("NUMA node", "8.62 GiB free of 9.96 GiB", "0.92 requested", "--gpu-memory-utilization"),
    ),
    Case(
        "cpu-node-below-kv",
        "ValueError: Available memory on node 0 (3.1/9.96 GiB) on kv cache allocation is less than"
        " requested memory for kv (4.0 GiB). Decrease --kv-cache-memory-bytes,"
        " VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.",
        OVERCOMMIT,
        ("3.10 GiB free of 9.96 GiB", "4.00 GiB asked", "VLLM_CPU_KVCACHE_SPACE"),
    ),
    Case(
        "cpu-worker-over-budget",
        "ValueError: The worker already uses 3.42 GiB (model weights and runtime), more than the"
        " 2.99 GiB of CPU memory reserved for it on node 0, leaving none for the KV cache. To"
        " resolve: increase `--gpu-memory-utilization` to more than 0.35, or set the KV cache"
        " size explicitly with `--kv-cache-memory-bytes` or VLLM_CPU_KVCACHE_SPACE.",
        UNSERVABLE,
        ("2.99 GiB reserved", "3.42 GiB", "--gpu-memory-utilization", "VLLM_CPU_KVCACHE_SPACE"),
    ),
    Case(
        "cpu-v0-no-blocks",
        "ValueError: No available memory for the cache blocks. Try increasing"
        " `VLLM_CPU_KVCACHE_SPACE` when initializing the engine.",
        UNSERVABLE,
        ("no memory was left for a single KV cache block", "VLLM_CPU_KVCACHE_SPACE"),
    ),
    Case(
        "cpu-v0-maxlen",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens"
        " that can be stored in KV cache (27216). Try increasing `VLLM_CPU_KVCACHE_SPACE` or"
        " decreasing `max_model_len` when initializing the engine.",
        UNSERVABLE,
        ("32,768", "27,216"),
    ),
    # vLLM, other backends and releases
    Case(
        "openvino-no-blocks",
        "ValueError: No available memory for the cache blocks. Try increasing"
        " `VLLM_OPENVINO_KVCACHE_SPACE` when initializing the engine.",
        UNSERVABLE,
        ("VLLM_OPENVINO_KVCACHE_SPACE",),
    ),
    Case(
        "openvino-profile-run",
        "RuntimeError: The error occurred during profile run. This might be due to insufficient"
        " GPU memory. Consider decreasing `max_model_len` to limit the maximum simultaneously"
        " processed tokens.",
        OVERCOMMIT,
        ("max_model_len",),
    ),
    Case(
        "tpu-hbm",
        "RuntimeError: Unable to load model, a likely reason is the model is too large for the"
        " current device's HBM memory. Consider switching to a smaller model or sharding the"
        " weights on more chips. See the detailed error: RESOURCE_EXHAUSTED",
        OVERCOMMIT,
        ("HBM", "smaller model"),
    ),
    Case(
        "cuda-free-below",
        "ValueError: Free memory on device (21.82/23.55 GiB) on startup is less than desired GPU"
        " memory utilization (0.95, 22.37 GiB). Decrease GPU memory utilization or reduce GPU"
        " memory used by other processes.",
        OVERCOMMIT,
        ("21.82 GiB free of 23.55 GiB", "0.95 requested", "--gpu-memory-utilization 0.91"),
    ),
    Case(
        "cuda-external-budget-0.33",
        "ValueError: Free memory on device cuda:0 (30.1/79.19 GiB) on startup is less than the"
        " engine's budget after excluding external process's weights (0.9, 41.27 GiB). Decrease"
        " GPU memory utilization or reduce GPU memory used by other processes.",
        OVERCOMMIT,
        ("30.10 GiB free of 79.19 GiB",),
    ),
    Case(
        "cuda-external-weights-0.33",
        "ValueError: Externally held weights on device cuda:0 (42.5/79.19 GiB) exceed the desired"
        " GPU memory utilization (0.5, 39.6 GiB). Increase GPU memory utilization or reduce GPU"
        " memory used by other processes.",
        OVERCOMMIT,
        ("42.5/79.19 GiB", "39.60 GiB budget of 79.19 GiB"),
    ),
    Case(
        "cuda-warmup-sampler",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy"
        " requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when"
        " initializing the engine.",
        OVERCOMMIT,
        ("1024 dummy requests", "lower max_num_seqs, lower gpu_memory_utilization"),
    ),
    Case(
        "rocm-hip-oom",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total"
        " capacity of 191.98 GiB of which 3.07 GiB is free.",
        OVERCOMMIT,
        ("HIP out of memory (1 errors)", "4.00 GiB", "3.07 GiB free of 192.0 GiB"),
    ),
    Case(
        "auto-fit-no-token",
        "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even"
        " a single token. Try increasing `gpu_memory_utilization`.",
        UNSERVABLE,
        ("no memory was left for a single KV cache block", "gpu_memory_utilization"),
    ),
    Case(
        "v0-prompt-over-pool",
        "WARNING 05-13 23:31:07 scheduler.py:1092] Input prompt (33012 tokens) is too long and"
        " exceeds the capacity of block_manager",
        UNSERVABLE,
        ("33,012", "whole pool"),
    ),
    # SGLang
    Case(
        "sglang-req-slots-real",
        "issues/sglang-alloc-req-slots-oom-13.log",
        OVERCOMMIT,
        ("request-slot pool ran out", "1 free, 2 asked", "--max-running-requests"),
    ),
    Case(
        "sglang-req-slots-0.2",
        "RuntimeError: Out of memory. Please set a smaller number for `--max-running-requests`.",
        OVERCOMMIT,
        ("request-slot pool ran out", "--max-running-requests"),
    ),
    Case(
        "sglang-not-enough-memory",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current"
        " value: self.server_args.mem_fraction_static=0.62",
        UNSERVABLE,
        ("mem_fraction_static 0.62", "--mem-fraction-static"),
    ),
    Case(
        "sglang-swa-cap",
        "RuntimeError: SWA pool cap (65536 tokens, 3.0 GiB) leaves no room for the full KV pool"
        " within the available 2.75 GiB. Reduce --max-running-requests, lower"
        " SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static.",
        UNSERVABLE,
        ("2.75 GiB available", "--mem-fraction-static"),
    ),
    Case(
        "sglang-mamba-state",
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache."
        " Computed max_mamba_cache_size=0 (total_rest_memory=0.41 GB, mamba_cache_per_req=612.5"
        " MB). Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static.",
        UNSERVABLE,
        ("0.41 GiB available", "--max-running-requests"),
    ),
    Case(
        "sglang-pool-below-context",
        "[2026-04-05 20:01:12 TP0] KV pool holds 98304 tokens, fewer than --context-length 131072."
        " One full-length request cannot fit, so long requests will be refused or truncated at"
        " serving time.",
        UNSERVABLE,
        ("98,304", "131,072"),
    ),
    Case(
        "sglang-retract-failed",
        "ValueError: Failed to retract any request. No space left for only one request.",
        UNSERVABLE,
        ("one request alone needs more KV than the whole pool",),
    ),
)


def _diagnose(case: Case, scratch: Path) -> Diagnosis:
    if case.text.startswith("issues/"):
        path = Path(shared("realdata", case.text))
    else:
        path = scratch / f"{case.name}.log"
        path.write_text(case.text + "\n")
    return analyze(AnalyzeOptions(incident=path, db=scratch / "db.duckdb")).diagnosis


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refusal_reaches_its_class_with_its_numbers(case: Case) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        diagnosis = _diagnose(case, Path(scratch))
    assert diagnosis.verdict.primary.value == case.primary, diagnosis.verdict.summary
    (used,) = diagnosis.inputs
    assert used.lines_parsed == used.lines_total  # the wording is recognised, not guessed
    said = " ".join(
        [f.title for f in diagnosis.findings]
        + [f"{r.action} {r.rationale}" for f in diagnosis.findings for r in f.remediation]
    )
    for number in case.says:
        assert number in said, said


def test_a_near_miss_is_not_a_refusal() -> None:
    """The same engine's words about memory that is fine: a verdict must not follow."""
    lines = (
        "(Worker pid=22172) INFO 11-29 13:34:39 [cpu_worker.py:261] Auto set (5.93/9.96) GiB for"
        " KV cache on node 0, with 9.17 GiB requested memory for the worker. 3.24 GiB memory"
        " was consumed by non-kv usages.\n"
        "WARNING 06-12 08:40:11 [cpu.py:155] Environment variable VLLM_CPU_KVCACHE_SPACE (GiB)"
        " for CPU backend is not set, using 4 by default.\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "cpu-ok.log"
        path.write_text(lines)
        diagnosis = analyze(AnalyzeOptions(incident=path, db=Path(scratch) / "db")).diagnosis
    assert diagnosis.verdict.primary.value not in (OVERCOMMIT, UNSERVABLE)


@pytest.mark.parametrize(
    ("text", "advice"),
    [
        (
            "ValueError: ... Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
            " when initializing the engine.",
            ["raise gpu_memory_utilization", "lower max_model_len"],
        ),
        (
            "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for"
            " `--max-running-requests`.",
            ["lower --max-running-requests"],
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            ["raise --mem-fraction-static"],
        ),
        (
            "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing",
            ["lower max_num_seqs", "lower gpu_memory_utilization"],
        ),
        ("Check VLLM_CPU_KVCACHE_SPACE.", ["change VLLM_CPU_KVCACHE_SPACE"]),
    ],
)
def test_the_engines_advice_keeps_its_direction(text: str, advice: list[str]) -> None:
    assert advised_changes({"raw": text}) == advice
