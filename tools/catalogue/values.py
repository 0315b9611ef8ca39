"""Placeholder values for the samples whose types the expression names do not tell.

samples.py guesses a value per placeholder from its expression and format spec; where that
guess would not read like the engine's real line (a value passed through `*args`, a piece
of text held in a variable that differs between releases), the row's `values` cell lists
the values instead. Each entry: (engine, regex searched in the message template, values).
"""

from __future__ import annotations

import json
import re

VALUES: tuple[tuple[str, str, list[str]], ...] = (
    # v1 stats from 0.28: the device word comes through *log_args.
    (
        "vllm",
        r"^\{\}Avg prompt throughput: .*Waiting: \{\} reqs, \{\} KV cache usage: \{\}%$",
        ["Engine 000: ", "808.1", "181.3", "6", "30", "GPU", "95.5"],
    ),
    # HPU worker: format_bytes() prints each size with its unit ('79.16 GiB').
    (
        "vllm",
        r"^Free device memory: \{\}, \{\} usable \(gpu_memory_utilization=",
        ["79.16 GiB", "39.58 GiB", "0.5", "15.83 GiB", "0.4", "23.75 GiB"],
    ),
    # SGLang 0.5.1 prefill line: token_msg is 'token usage: X, ' (no #token yet).
    (
        "sglang",
        r"^Prefill batch\. #new-seq: \{\}, #new-token: \{\}, #cached-token: \{\}, \{\}#running-req",
        ["1", "158", "0", "token usage: 0.08, ", "31", "0"],
    ),
    # SGLang 0.5.23: the pool line names its memory field through a conditional expression,
    # and the allocation line takes the cache's name and verb from variables.
    (
        "sglang",
        r"context_len=\{\}, \{\}=\{\} GB$",
        ["468411", "8192", "16384", "4575", "8192", "available_gpu_mem", "20.15"],
    ),
    (
        "sglang",
        r"^\{\} \{\}\. dtype: \{\}, #tokens: \{\}, K size: \{\} GB, V size: \{\} GB$",
        ["KV Cache", "is allocated", "torch.bfloat16", "468411", "27.92", "27.92"],
    ),
    (
        "sglang",
        r"^\{\} \{\}\. dtype: \{\}, #tokens: \{\}, KV size: \{\} GB$",
        ["KV Cache", "is allocated", "torch.bfloat16", "468411", "31.42"],
    ),
)


def values_for(row: dict[str, str]) -> str:
    """The row's `values` cell: a JSON list where VALUES names the message, else ''."""
    for engine, pattern, values in VALUES:
        if row["engine"] == engine and re.search(pattern, row["message"]):
            return json.dumps(values)
    return ""
