"""Real pastes from public issues (fixtures/pastes): kvdiag's verdict against a careful reader's.

Every paste of the tuning set (INDEX.toml, `held_out = false`) is analysed alone and its
verdict must be the reader's class; those kvdiag gets wrong today are strict xfails, with
what it gets wrong, so a fix shows up as an XPASS to turn into a plain case. Held-out pastes
are never checked for their class (they stay out of tuning): only that they are listed and
that kvdiag does not call them saturated, which no paste of either set may be unless the
reader says so.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from tools.pastes.table import (
    CLASSES,
    ENGINES,
    INDEX,
    PASTES,
    UNREADABLE,
    Paste,
    paste_files,
    pastes,
    verdict,
)

ENTRIES = pastes()
TUNING = [p for p in ENTRIES if not p.held_out]

# What kvdiag gets wrong today on the tuning set, by paste.
WRONG_TODAY = {
    "sglang-jax-decode-cache-miss-field.log": (
        "one running request, token usage 0.00, #queue-req 0 on every line: the trailing"
        " #cache_miss field (sglang-jax's) makes every decode line miss its template:"
        " nothing read"
    ),
    "vllm-v1-waiting-14-one-running-metrics-access.log": (
        "Running 1, Waiting 14 on three lines 10 s apart at 76.5-76.8%: three observations"
        " are too few for the queue to count, so admission_limited is withheld"
    ),
    "trtllm-maxtokens-paged-kv-refusal.log": (
        "the 0.6 wording 'maxTokensInPagedKvCache must be large enough to process at least 1"
        " sequence' (no pool size in parentheses, no 'Assertion failed:') is not matched:"
        " nothing read"
    ),
    "trtllm-cudamallocasync-oom-batch-192.log": (
        "'CUDA runtime error in ::cudaMallocAsync(...): out of memory' is read as a line but"
        " not as an out-of-memory; the C++ stack frames are not matched"
    ),
    "trtllm-headerless-memusage-small-model.log": (
        "TensorRT-LLM memory lines without their '[TensorRT-LLM][INFO] [MemUsageChange]'"
        " header are not recognised: nothing read, exit 3 instead of insufficient_evidence"
    ),
    "dynamo-frontend-k9s-frame-router-formula.log": (
        "Dynamo frontend lines inside a k9s frame ('│ ... │') are not recognised: nothing"
        " read, exit 3 instead of insufficient_evidence"
    ),
    "vllm-v1-no-available-memory-traceback-source-only.log": (
        "the refusal shows only as the raising source line"
        " 'raise ValueError(\"No available memory for the cache blocks. \"' of an EngineCore"
        " traceback: the frames are read, the refusal is not"
    ),
    "lmcache-vllm-preempted-requests-resumed.log": (
        "vLLM's scheduler line 'Preempted request ... has been resumed!' is not a known"
        " message: the preemptions go unseen"
    ),
    "sglang-rocm-dp-negative-profiled-pool.log": (
        "'max_total_tokens=131072 is larger than the profiled value -561981' is read as a line"
        " but the negative pool is not taken as a pool that holds no request"
    ),
    "sglang-pd-metrics-aborted-requests.prom": (
        "healthy although sglang:num_aborted_requests_total is 157 of 217 requests: the"
        " aborts are not weighed"
    ),
    "trtllm-pytrtllm-request-metrics.prom": (
        "vLLM-style request gauges under a 'pytrtllm:' prefix without HELP/TYPE lines are not"
        " recognised: nothing read, exit 3 instead of insufficient_evidence"
    ),
}

# Pastes of either set that kvdiag calls saturated although the reader does not (none today;
# a false saturation is never acceptable, so any entry here is a strict xfail with its reason).
FALSE_SATURATION_TODAY: dict[str, str] = {}


@cache
def kvdiag_says(file: str) -> str:
    return verdict(PASTES / file)


def _params(entries: list[Paste], wrong: dict[str, str]) -> list[object]:
    return [
        pytest.param(
            p,
            id=p.file,
            marks=[pytest.mark.xfail(strict=True, reason=wrong[p.file])] if p.file in wrong else [],
        )
        for p in entries
    ]


@pytest.mark.parametrize("paste", _params(TUNING, WRONG_TODAY))
def test_kvdiag_gives_the_readers_class(paste: Paste) -> None:
    assert kvdiag_says(paste.file) == paste.reader_class, paste.why


@pytest.mark.parametrize("paste", _params(ENTRIES, FALSE_SATURATION_TODAY))
def test_no_paste_is_falsely_saturated(paste: Paste) -> None:
    if paste.reader_class != "saturation":
        assert kvdiag_says(paste.file) != "saturation", paste.why


def test_the_known_misses_are_tuning_pastes() -> None:
    tuning = {p.file for p in TUNING}
    assert set(WRONG_TODAY) <= tuning
    assert set(FALSE_SATURATION_TODAY) <= {p.file for p in ENTRIES}


def test_every_file_has_an_entry_and_every_entry_a_file() -> None:
    files = [p.name for p in paste_files()]
    listed = [p.file for p in ENTRIES]
    assert len(listed) == len(set(listed)), "a paste is listed twice"
    assert set(files) == set(listed)


@pytest.mark.parametrize("paste", ENTRIES, ids=lambda p: p.file)
def test_the_entry_is_complete(paste: Paste) -> None:
    assert re.match(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+ ", paste.source)
    assert paste.why.strip() and paste.version.strip()
    assert paste.engine in ENGINES and paste.file.startswith(paste.engine + "-")
    assert paste.reader_class in CLASSES
    assert paste.kvdiag_before in (*CLASSES, UNREADABLE)
    assert isinstance(paste.held_out, bool)
    assert paste.path.stat().st_size > 0


def test_a_third_is_held_out() -> None:
    held = sum(p.held_out for p in ENTRIES)
    assert len(ENTRIES) >= 45
    assert abs(held - len(ENTRIES) / 3) <= 2, (held, len(ENTRIES))


def test_the_index_is_the_one_the_table_reads() -> None:
    assert INDEX.parent == PASTES and INDEX.is_file()
