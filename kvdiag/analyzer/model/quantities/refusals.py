"""The engines' start-up refusals and capacity errors, as the rules group and quote them.

Every backend words its refusals its own way (CUDA, ROCm, CPU, XPU, TPU, HPU, OpenVINO;
vLLM and SGLang). The format packs map each wording to one of a few `event` values of
log_capacity_errors; the rules read those values here, so a new wording needs a pack
entry and no rule change. Where a wording carries numbers that have no column of their
own, the finding quotes the engine's sentence, which holds them.
"""

from __future__ import annotations

import re
from typing import Any

# KV101: the pool (as configured) cannot hold anything, or cannot hold one request.
NO_KV_ROOM = (
    "no_cache_blocks",  # vLLM: no memory for a single block, every backend's wording
    "sglang_not_enough_memory",  # SGLang: the pool or a sub-pool came out empty
    "sglang_one_request_unfit",  # SGLang: the byte budget cannot hold one request
)
ONE_REQUEST_UNFIT = (
    "prompt_exceeds_pool",  # v0: a prompt needs more blocks than the whole pool
    "sglang_retract_failed",  # SGLang: nothing left to retract, one request alone
)
# KV101 too: the pool holds fewer per-request state slots than max_num_seqs asks for
# (vLLM hybrid models: one Mamba cache block per running sequence, checked at start-up).
STATE_SLOTS_SHORT = ("mamba_blocks_below_seqs",)
# KV103: the memory the engine was told to take is not there, or ran out outside the pool.
MEMORY_REFUSALS = (
    "free_below_desired",  # free device (or NUMA node) memory below the budget
    "kv_memory_short",  # CPU: the node has less than the KV cache asked for
    "external_weights_exceed",  # weights held by another process exceed the budget
    "warmup_oom",  # out of memory while warming up with max_num_seqs dummy requests
    "device_memory_refused",  # the model does not fit the device (TPU HBM, OpenVINO)
    "sglang_req_slots_exhausted",  # SGLang's request-slot pool ran out
    "tgi_warmup_oom",  # TGI: out of memory at warm-up with a full prefill batch
)

_EXCEPTION = re.compile(r"^(?:[\w.]+(?:Error|Exception): )+")
_SENTENCE = re.compile(r"^(.+?[.!])(?:\s|$)")
# A setting the engine says to change: `gpu_memory_utilization`, --max-running-requests,
# VLLM_CPU_KVCACHE_SPACE (backticks, flags and environment variables).
_SETTING = re.compile(r"`(-{0,2}[a-z][\w-]*)`|(?<![\w`-])(--[a-z][\w-]+)|\b(VLLM_\w+|SGLANG_\w+)\b")


def error_text(row: dict[str, Any]) -> str:
    """The error's own text: the message (or the raw line), without the exception name."""
    text = str(row.get("message") or row.get("raw") or "")
    marker = re.search(r"(?:[\w.]+(?:Error|Exception): )", text)
    if marker and not row.get("message"):
        text = text[marker.start() :]
    return _EXCEPTION.sub("", text).strip()


def first_sentence(row: dict[str, Any]) -> str:
    """The error's first sentence (the one with the numbers), without a trailing period."""
    text = error_text(row)
    match = _SENTENCE.match(text)
    return (match.group(1) if match else text).rstrip(".")


def named_settings(row: dict[str, Any]) -> list[str]:
    """The settings the engine's text tells the reader to change, in order, once each
    (read from the whole line: a pack may keep only the message's first sentences)."""
    return [change.split(" ", 1)[1] for change in advised_changes(row)]


# The verb before a setting in the engine's advice: "Try increasing `gpu_memory_utilization`
# or decreasing `max_model_len`", "Please set a smaller number for `--max-running-requests`".
_RAISE = re.compile(r"\b(?:increas\w*|rais\w*|larger|higher|more)\b", re.I)
_LISTED = re.compile(r"^[\s`,]*(?:or|and)?[\s`,]*$")
_LOWER = re.compile(r"\b(?:decreas\w*|lower\w*|reduc\w*|smaller|less)\b", re.I)


def advised_changes(row: dict[str, Any]) -> list[str]:
    """Each setting the engine's advice names, with the direction it advises: "raise
    --mem-fraction-static", "lower max_model_len", or "change X" where it names none."""
    text = str(row.get("raw") or error_text(row))
    out: dict[str, str] = {}
    start, verb = 0, "change"
    for m in _SETTING.finditer(text):
        name = next(g for g in m.groups() if g)
        before = text[start : m.start()]
        verbs = [(v.end(), "raise") for v in _RAISE.finditer(before)]
        verbs += [(v.end(), "lower") for v in _LOWER.finditer(before)]
        if verbs:
            verb = max(verbs)[1]
        elif not _LISTED.match(before):  # "lowering `a` or `b`": b is lowered too
            verb = "change"
        out.setdefault(name, f"{verb} {name}")
        start = m.end()
    return list(out.values())
