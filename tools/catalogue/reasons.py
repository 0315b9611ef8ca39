"""Why a catalogue row needs no pack entry, or which kind of gap it is: the judgement
behind the `why_none` column, written as ordered rules so it can be reviewed and rerun.

The first rule that matches a row gives its reason. `SPECIFIC` holds decisions about
single messages, read before the general rules. A reason starts with one of
- 'debug only': printed at DEBUG, off in production logs;
- 'out of scope: ...': about a feature kvdiag does not model (KV transfer between
  instances, host or disk KV tiers, LoRA, multimodal caches, speculative decoding);
- 'not about capacity: ...': the keyword matched, the message is about something else;
- 'covered: ...': its facts reach the store through another recognised line;
- 'gap: ...': it carries a capacity fact and no pack event reads it yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REASON_KINDS = ("debug only", "out of scope: ", "not about capacity: ", "covered: ", "gap: ")


@dataclass(frozen=True, slots=True)
class Rule:
    reason: str
    message: str = ""  # regex searched in the lower-cased message
    path: str = ""  # regex searched in the source path
    level: str = ""  # regex matched at the start of the level ('raise' for raised errors)

    def matches(self, row: dict[str, str]) -> bool:
        path = row["source"].split(":")[0]
        return (
            (not self.level or re.match(self.level, row["level"]) is not None)
            and (not self.path or re.search(self.path, path) is not None)
            and (not self.message or re.search(self.message, row["message"].lower()) is not None)
        )


def _any(*alternatives: str) -> str:
    return "|".join(alternatives)


_LOGGED = "(?!raise)"  # a logger call, not a raised error

# Decisions about single messages (reviewed one by one).
SPECIFIC: tuple[Rule, ...] = (
    Rule(
        "gap: runtime pool exhaustion",
        _any("^no usable cache memory left", r"^out of memory\. please set a smaller number"),
    ),
    Rule(
        "covered: engine_init reports kv_cache_dtype", r"^using fp8\w* data type to store kv cache"
    ),
    Rule(
        "gap: KV pool sizing (the CPU backend's default KV space)",
        r"vllm_cpu_kvcache_space.*default",
    ),
    Rule("not about capacity: argument check", _any("^invalid preemption mode", "^unknown preem")),
    Rule("not about capacity: prefix-cache reset", r"^failed to reset kv cache"),
    Rule("not about capacity: prefix-cache flush refused", r"^cache not flushed because"),
    Rule(
        "covered: the KV cache size line after it prints the multiplied size",
        r"^multiplying the gpu kv cache size by",
    ),
    Rule(
        "covered: max_model_len reaches the store from engine_init and max_model_len",
        r"^the model has a long context length",
    ),
    Rule(
        "not about capacity: advice printed at every start",
        _any("^capturing cudagraphs for decoding", "^cuda graphs can take additional"),
    ),
    Rule(
        "not about capacity: feature notice",
        _any(
            "^hybrid kv cache manager is disabled for this hybrid", "^mlx stub", "^kv cache skipped"
        ),
    ),
    Rule(
        "not about capacity: argument check",
        _any(
            r"^gpu memory utilization must be less than", r"^node \{\} is not in available memory"
        ),
    ),
    Rule(
        "not about capacity: progress or profiling output",
        _any(
            "^start profiling run with dummy",
            "^sorted by (?:cuda|xpu) time",
            "^update (?:engine )?weights",
        ),
    ),
    Rule(
        "not about capacity: NUMA advice on the CPU backend",
        _any(r"numa node number", "^sglang_cpu_omp_threads_bind"),
    ),
    Rule("not about capacity: shutdown", r"\(server shutting down\)"),
    Rule("not about capacity: forced retraction of the test mode", r"^testing retraction"),
)

# Capacity messages whose words the scope rules below would misread (a stats line that
# mentions 'waiting-image-req', a request rejection raised from the tokenizer's module).
FIRST_GAPS: tuple[Rule, ...] = (
    Rule(
        "gap: periodic stats",
        r"^(?:\{\})?(?:decode batch|prefill batch|avg prompt throughput|iteration\()",
        level=_LOGGED,
    ),
    Rule("gap: retraction", r"^retract_decode: aborted", level=_LOGGED),
    Rule(
        "gap: runtime pool exhaustion",
        _any("no space left for only one request", r"cannot get \{\} free blocks"),
    ),
    Rule(
        "gap: request rejected for length or capacity",
        _any(
            r"(?:prompt|input|request|you passed).*context length",
            r"context length.*(?:your request|you requested|truncat)",
        ),
    ),
    Rule(
        "gap: start-up refusal for memory",
        _any("leaves no room for", r"fits only \{\} slots", "cannot fit one"),
        level="raise",
    ),
    Rule("not about capacity: leak check (an engine bug)", r"leak detected"),
)

OUT_OF_SCOPE: tuple[Rule, ...] = (
    Rule(
        "out of scope: KV transfer between instances",
        path=_any("kv_transfer", "disaggregat", "/connector", "lmcache", "nixl", "mooncake")
        + _any("", "kv_events", "/pd_", "ec_transfer", "mori"),
    ),
    Rule(
        "out of scope: KV transfer between instances",
        _any("kv ?transfer", "kv ?connector", "disaggregat", "nixl", "mooncake", "lmcache")
        + _any("", "prefill.decode", r"\bpd\b"),
    ),
    Rule(
        "out of scope: host or disk KV tier",
        path=_any("hicache", "offload", "storage", "pool_host", "hiradix", "hisparse", "hierarch"),
    ),
    Rule(
        "out of scope: host or disk KV tier",
        _any("hicache", "host memory", "host pool", "host kv", "offload", "hierarchical")
        + _any("", "storage backend"),
    ),
    Rule("out of scope: LoRA adapters", r"\blora\b"),
    Rule("out of scope: LoRA adapters", path=r"/lora/"),
    Rule(
        "out of scope: multimodal or encoder cache",
        _any("encoder cache", "mm cache", "multimodal", "mm_", "processor cache", "image", "video")
        + _any("", "audio"),
    ),
    Rule("out of scope: multimodal or encoder cache", path=_any("multimodal", "/mm_", "encoder_")),
    Rule(
        "out of scope: speculative decoding",
        path=_any("spec_decode", "speculative", "eagle", "medusa", "/mtp"),
    ),
    Rule("not about capacity: compile or graph cache", path=r"compil"),
    Rule(
        "not about capacity: compile or graph cache",
        _any("compil", "inductor", "dynamo", "triton cache", "autotun"),
    ),
    Rule(
        "not about capacity: communication buffers",
        path=_any("device_communicators", "shm_broadcast", "/distributed/(?!kv)"),
    ),
    Rule(
        "not about capacity: files and tokenizers",
        path=_any("transformers_utils", "tokeniz", "model_loader", "weight_utils", "hf_"),
    ),
    Rule(
        "not about capacity: model or kernel support",
        path=_any("/models/", "/layers/", "quantization", "/ops/", "kernels", "/attention/"),
    ),
)

GAPS: tuple[Rule, ...] = (
    Rule(
        "gap: preemption",
        _any(r"\bis preempted\b", "preempted by", "preempting", "preemptions? (?:happened|occ)"),
        level=_LOGGED,
    ),
    Rule(
        "gap: retraction",
        _any("retract(?:ed)? (?:requests?|reqs)", "#retracted", "retraction"),
        level=_LOGGED,
    ),
    Rule(
        "gap: runtime pool exhaustion",
        _any("no free blocks", "not enough kv cache blocks", "lack of cpu swap", "pool is full")
        + _any("", "out of memory happened", "(?:prefill|decode) out of memory")
        + _any("", "runs out of memory", "kv cache is full", "no available (?:kv|slots|blocks)"),
    ),
    Rule(
        "gap: start-up refusal for memory",
        r"(?:memory|gib|\bgb\b|hbm|kv cache space|cache blocks).*"
        r"(?:less than|not enough|insufficient|larger than|exceed|too large|too small"
        r"|no available|out of memory|not fit|none for)"
        r"|(?:not enough|insufficient|no available|out of) (?:gpu |device |cpu |kv )?"
        r"(?:memory|cache)|too large for the current device|no usable cache memory",
        level="raise",
    ),
    Rule(
        "gap: request rejected for length or capacity",
        _any("maximum context length is", "too long and exceeds", "exceeds the capacity")
        + _any("", "longer than the (?:model|max|kv)", "exceeds model's maximum context")
        + _any("", "queue full", "max queued tokens", "rejecting request"),
    ),
    Rule(
        "gap: KV pool sizing",
        _any("kv cache size", r"# \{\} blocks", r"blocks: \{\}", "num_gpu_blocks")
        + _any("", "max_total_num_tokens", "kv cache is allocated", "kv cache memory")
        + _any("", "maximum concurrency", r"#tokens: \{\}", "kv (?:cache )?pool (?:size|capac)"),
        level=_LOGGED,
    ),
    Rule(
        "gap: start-up memory accounting",
        _any("memory profil", "model weights", "load weight", "weights? (?:took|take|memory)")
        + _any("", "free (?:device |gpu )?memory", "available memory", "memory usage")
        + _any("", "avail mem", "mem usage", "reserved for kv", "peak memory"),
        level=_LOGGED,
    ),
    Rule(
        "gap: periodic stats",
        _any("token usage", "kv cache usage", "#running-req", "#queue-req"),
        level=_LOGGED,
    ),
)

FALLBACK: tuple[Rule, ...] = (
    Rule("not about capacity: argument check", level="raise"),
    Rule("not about capacity: other"),
)


def reason_for(row: dict[str, str]) -> str:
    """The first matching rule's reason (DEBUG rows: 'debug only')."""
    if row["level"] == "DEBUG":
        return "debug only"
    for rule in (*SPECIFIC, *FIRST_GAPS, *OUT_OF_SCOPE, *GAPS, *FALLBACK):
        if rule.matches(row):
            return rule.reason
    raise AssertionError("FALLBACK matches every row")
