"""A sample log line for each catalogue row: its template filled, behind the engine's header.

Placeholders get values of the type their expression and format spec suggest (a count, a
size in GiB, a ratio, a request id ...); a row's `values` cell overrides them where the
guess would not read like the real line. Logged messages get the header the engine's
logger prints in the row's newest release; a raised error is the last line of its
traceback, `ValueError: ...`.
"""

from __future__ import annotations

import json
import re

from tools.catalogue.table import version_key

# Ordered: the first pattern that matches the placeholder's expression picks its value.
_BY_NAME: tuple[tuple[re.Pattern[str], object], ...] = tuple(
    (re.compile(pattern, re.I), value)
    for pattern, value in (
        (r"preemption_mode|\bmode\b", "PreemptionMode.RECOMPUTE"),
        (r"log_prefix", "Engine 000: "),
        (
            r"estimated_msg",
            "Based on the available memory, the estimated maximum model length is 4096. ",
        ),
        # SGLang's stats lines: optional pieces held in variables.
        (r"token(?:_usage)?_msg", "#token: 4096, token usage: 0.09, "),
        (r"graph_backend|'cuda graph'", "cuda graph"),
        (r"can_run_cuda_graph", "True"),
        (r"_msg$|suffix|_note$|_hint$|dummy", ""),
        # vLLM's device words: platform.device_name is lower case ('cuda'), dispatch_key
        # upper case, and the v1 KV lines say 'GPU' for CUDA.
        (r"device_name\b(?!\()", "cuda"),
        (r"dispatch_key", "CUDA"),
        (r"_kv_cache_device_name|\bpools\b|kv_device|kv_cache_device", "GPU"),
        (r"^kv_cache_memory$", "12.50 GiB GPU"),
        (r"request_id|req_id|\brid\b|seq_group\.|\bseq_id|\.id\b|_id$", "cmpl-8f3a2c"),
        (r"dtype", "auto"),
        (r"device|platform", "cuda"),
        (r"ratio|fraction|util|usage|percent|rate\b", 0.9),
        (r"gib|_gb\b|/ ?_?gb|giga", 12.5),
        (r"bytes", 4096),
        (r"memory|\bmem", 12.5),
        (r"time|elapsed|seconds|duration|secs", 3.21),
        (r"len|num|size|tokens|blocks|count|max|min|seqs|reqs|batch|slots|capacity|limit", 4096),
        (r"path|dir|file|name|model|backend|type", "facebook/opt-125m"),
        (r"^(?:e|err|exc|error|ex)$", "out of resources"),
    )
)
_DEFAULT_INT = 4096


def guess_value(expr: str, spec: str) -> object:
    """A value of the kind `expr` holds, as its name and format spec suggest."""
    conversion = spec[-1:] if spec else ""
    if conversion in "dxi" and conversion:
        return _DEFAULT_INT
    if conversion in "feEgG%" and conversion:
        return 0.9 if re.search(r"ratio|util|fraction|usage|rate", expr, re.I) else 12.5
    if "," in spec or "_" in spec:
        return 123456
    for pattern, value in _BY_NAME:
        if pattern.search(expr):
            return value
    return _DEFAULT_INT


def render(value: object, spec: str) -> str:
    """`value` as the spec prints it: f-string specs (':.2f', ',') or %-conversions."""
    if isinstance(value, str):
        return value
    try:
        if spec.startswith("%"):
            return spec % value
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def fill(row: dict[str, str]) -> str:
    """The row's message with every placeholder filled (its `values` cell wins)."""
    holes = json.loads(row["args"]) if row["args"] else []
    given = json.loads(row["values"]) if row.get("values") else None
    if given is not None:
        values = [str(v) for v in given]
    else:
        values = [render(guess_value(expr, spec), spec) for expr, spec in holes]
    count = row["message"].replace("{{", "").replace("}}", "").count("{}")
    if len(values) != count:
        raise ValueError(f"{count} placeholders, {len(values)} values: {row['message']!r}")
    return row["message"].format(*values)


def header(row: dict[str, str], index: int) -> str:
    """The logger header of the row's engine and newest release (distinct per row, so
    the lines of different rows never join into one message)."""
    seconds = f"{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}"
    path, _, line = row["source"].partition(" ")[0].rpartition(":")
    if row["engine"] == "sglang":
        return f"[2025-01-01 {seconds} TP0] "
    name = path.rsplit("/", 1)[-1]
    where = f"[{name}:{line}]" if version_key(row["last_release"]) >= (0, 8) else f"{name}:{line}]"
    proc = "(EngineCore_DP0 pid=123) " if path.startswith("vllm/v1/") else ""
    return f"{proc}{row['level']} 11-29 {seconds} {where} "


def sample(row: dict[str, str], index: int = 0) -> str:
    """The sample text (lines joined by newlines) for a row."""
    message = fill(row)
    if row["level"].startswith("raise "):
        return f"{row['level'].removeprefix('raise ')}: {message}"
    return header(row, index) + message
