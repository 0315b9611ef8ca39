"""Tables filled from server logs (vLLM; SGLang adds its own columns where words differ)."""

from __future__ import annotations

from kvdiag.analyzer.schema.base import LOG_ENVELOPE as _BASE_ENVELOPE
from kvdiag.analyzer.schema.base import PROVENANCE, Table, cols

# Log identity and provenance beyond the shared envelope: the other parallel ranks a
# process name gives, and how a record was rebuilt when it spans or shares lines.
LOG_ENVELOPE = _BASE_ENVELOPE + cols(
    (
        "dp_rank",
        "INTEGER",
        "data-parallel rank from the process name (EngineCore_DP1, Worker_DP1_TP0)",
    ),
    ("pp_rank", "INTEGER", "pipeline-parallel rank from the process name (Worker_PP1_TP0)"),
    ("ep_rank", "INTEGER", "expert-parallel rank from the process name (Worker_TP3_EP3)"),
    ("source_line_end", "BIGINT", "last line of a record spanning several lines; NULL for one"),
    (
        "repair",
        "VARCHAR",
        "how the record was rebuilt: 'split glued line', 'rejoined wrapped line', "
        "'attributed interleaved prefix'; NULL when read as is",
    ),
)

LOG_TABLES: tuple[Table, ...] = (
    Table(
        "log_kv_pool",
        "KV pool sizing lines printed at start-up (one row per line, per rank).",
        LOG_ENVELOPE
        + cols(
            ("event", "VARCHAR", "which line shape: kv_cache_size, gpu_blocks, ..."),
            ("device", "VARCHAR", "GPU, CPU, XPU ... as printed"),
            ("tokens", "BIGINT", "pool size in tokens"),
            ("blocks", "BIGINT", "pool size in blocks"),
            ("cpu_blocks", "BIGINT", "v0 CPU swap blocks"),
            ("gib", "DOUBLE", "pool memory in GiB (Available KV cache memory, Explicitly set ...)"),
            ("total_gib", "DOUBLE", "memory the pool was carved from, when printed"),
            ("max_model_len", "BIGINT", "max_model_len the concurrency refers to"),
            ("concurrency", "DOUBLE", "maximum concurrency at max_model_len"),
            ("engine_idx", "INTEGER", "the `Engine 000:` index, where printed"),
            # vLLM hybrid (attention + Mamba) models: the block the engine chose itself
            (
                "block_size",
                "INTEGER",
                "tokens per block the engine set itself (vLLM hybrid: one attention page "
                "holds a Mamba state page)",
            ),
            ("padding_pct", "DOUBLE", "vLLM hybrid: padding added to the Mamba page, percent"),
            # SGLang: the pool line's K and V halves, the start-up summary and its caps
            ("k_gib", "DOUBLE", "SGLang K buffer of the pool, GiB (gib is K + V)"),
            ("v_gib", "DOUBLE", "SGLang V buffer of the pool, GiB"),
            ("kv_dtype", "VARCHAR", "KV cache dtype as the pool line prints it (SGLang 0.5.23+)"),
            ("max_running_requests", "BIGINT", "SGLang max_running_requests in effect"),
            (
                "requested_running",
                "BIGINT",
                "max_running_requests asked for, before SGLang reduced it to fit the pool",
            ),
            ("max_prefill_tokens", "BIGINT", "SGLang max_prefill_tokens in effect"),
            ("chunked_prefill_size", "BIGINT", "SGLang chunked_prefill_size in effect"),
            (
                "available_gib",
                "DOUBLE",
                "device memory left after start-up, GiB (SGLang available_gpu_mem)",
            ),
        ),
    ),
    Table(
        "log_stats",
        "Periodic engine stats lines (v0 every 5 s, v1 every 10 s, only while busy).",
        LOG_ENVELOPE
        + cols(
            ("engine_idx", "INTEGER", "the `Engine 000:` index (v1)"),
            ("engines", "INTEGER", "N of `N Engines Aggregated:` (v1 0.11.2+): N engines summed"),
            ("prompt_tps", "DOUBLE", "avg prompt throughput, tokens/s"),
            ("gen_tps", "DOUBLE", "avg generation throughput, tokens/s"),
            ("running", "BIGINT", "running requests"),
            ("waiting", "BIGINT", "waiting (v1) or pending (v0) requests"),
            ("swapped", "BIGINT", "swapped requests (v0)"),
            ("deferred", "BIGINT", "deferred requests (v1 0.20+)"),
            ("preemptions", "BIGINT", "preemptions since the previous stats line (v1 0.11.2+)"),
            ("kv_usage_pct", "DOUBLE", "KV cache usage of the device pool, percent"),
            ("kv_device", "VARCHAR", "device word of the usage field: GPU, CPU, XPU ..."),
            ("cpu_kv_usage_pct", "DOUBLE", "CPU swap-space usage (v0), percent"),
            ("prefix_hit_pct", "DOUBLE", "prefix cache hit rate, percent"),
            ("cpu_prefix_hit_pct", "DOUBLE", "v0 CPU prefix cache hit rate, percent"),
            ("external_prefix_hit_pct", "DOUBLE", "KV-connector prefix cache hit rate, percent"),
            ("mm_hit_pct", "DOUBLE", "multimodal cache hit rate, percent"),
            ("used_tokens", "BIGINT", "tokens held in the pool (SGLang #token)"),
            ("new_tokens", "BIGINT", "tokens prefilled in this batch (SGLang #new-token)"),
            ("cached_tokens", "BIGINT", "prompt tokens served from the prefix cache (SGLang)"),
            ("event", "VARCHAR", "line shape: stats_v0, stats_v1, sglang_decode, sglang_prefill"),
            ("spec_mean_accept_len", "DOUBLE", "speculative decoding: mean acceptance length"),
            ("spec_accept_pct", "DOUBLE", "speculative decoding: draft acceptance rate, percent"),
            ("spec_accepted_tokens", "BIGINT", "speculative decoding: tokens accepted"),
            ("spec_drafted_tokens", "BIGINT", "speculative decoding: tokens drafted"),
            # SGLang batch lines: what a prefill admitted, hybrid pools, the graph flag
            ("new_seqs", "BIGINT", "sequences admitted by this prefill batch (SGLang #new-seq)"),
            ("swa_tokens", "BIGINT", "tokens in the sliding-window pool (SGLang #swa token)"),
            ("swa_usage_pct", "DOUBLE", "sliding-window pool usage, percent (SGLang hybrid)"),
            ("mamba_usage_pct", "DOUBLE", "mamba state pool usage, percent (SGLang hybrid)"),
            ("pending_tokens", "BIGINT", "prompt tokens still to prefill (SGLang #pending-token)"),
            ("retracted_reqs", "BIGINT", "retracted requests waiting to resume (SGLang PD decode)"),
            ("cuda_graph", "VARCHAR", "whether the batch ran as a CUDA graph (SGLang), as printed"),
        ),
    ),
    Table(
        "log_engine",
        "Engine identity: the 'Initializing ... engine (vX) with config' line and the banner.",
        LOG_ENVELOPE
        + cols(
            ("event", "VARCHAR", "engine_init | banner | api_server_version"),
            ("engine", "VARCHAR", "vllm | sglang | tgi"),
            ("engine_kind", "VARCHAR", "V0 | V1 (vLLM), as printed"),
            ("version", "VARCHAR", "engine version as printed, e.g. 0.32.0"),
            ("model", "VARCHAR", "model path or name"),
            ("dtype", "VARCHAR", "model dtype"),
            ("max_seq_len", "BIGINT", "max_seq_len (= max_model_len)"),
            ("tensor_parallel_size", "INTEGER", "TP size"),
            ("pipeline_parallel_size", "INTEGER", "PP size"),
            ("data_parallel_size", "INTEGER", "DP size"),
            ("kv_cache_dtype", "VARCHAR", "KV cache dtype (auto = model dtype)"),
            ("enable_prefix_caching", "VARCHAR", "True | False | None as printed"),
            ("device", "VARCHAR", "device_config: cuda, cpu, ..."),
            ("quantization", "VARCHAR", "quantization method"),
            ("args", "VARCHAR", "non-default args as JSON, or the launch command as printed"),
            ("max_num_batched_tokens", "BIGINT", "scheduler token budget (chunked prefill line)"),
            # SGLang's server_args dump: the settings vLLM names differently or lacks
            ("mem_fraction_static", "DOUBLE", "SGLang --mem-fraction-static (weights + KV pool)"),
            ("page_size", "INTEGER", "SGLang --page-size (tokens per KV page)"),
            ("chunked_prefill_size", "BIGINT", "SGLang --chunked-prefill-size (-1: off)"),
            ("max_running_requests", "BIGINT", "SGLang --max-running-requests"),
            ("max_total_tokens", "BIGINT", "SGLang --max-total-tokens (an explicit pool size)"),
            ("max_prefill_tokens", "BIGINT", "SGLang --max-prefill-tokens"),
            ("disable_radix_cache", "VARCHAR", "SGLang --disable-radix-cache, as printed"),
        ),
    ),
    Table(
        "log_memory",
        "Start-up memory accounting: profiling results, weights, CUDA graphs, free memory checks.",
        LOG_ENVELOPE
        + cols(
            (
                "event",
                "VARCHAR",
                "which line: memory_profile, model_loading, graph_capture, free_memory, ...",
            ),
            ("total_gib", "DOUBLE", "device total memory, GiB"),
            ("utilization", "DOUBLE", "gpu_memory_utilization (or SGLang mem_fraction_static)"),
            ("requested_gib", "DOUBLE", "total x utilization, GiB"),
            ("weights_gib", "DOUBLE", "model weights, GiB"),
            ("non_torch_gib", "DOUBLE", "non-torch memory (NCCL, CUDA context), GiB"),
            ("activation_gib", "DOUBLE", "PyTorch activation peak, GiB"),
            ("cuda_graph_gib", "DOUBLE", "CUDA graph memory, GiB"),
            ("kv_gib", "DOUBLE", "memory left for (or given to) the KV cache, GiB"),
            ("free_gib", "DOUBLE", "free device memory at the time, GiB"),
            ("initial_used_gib", "DOUBLE", "memory in use before the engine started, GiB"),
            ("kv_cache_memory_bytes", "BIGINT", "a suggested or current --kv-cache-memory value"),
            ("seconds", "DOUBLE", "duration the line reports"),
            ("peak_torch_gib", "DOUBLE", "peak PyTorch memory during profiling (0.6.4), GiB"),
            ("consumed_gib", "DOUBLE", "weights + non-torch memory as one figure (0.27+), GiB"),
            ("kv_full_bytes", "BIGINT", "--kv-cache-memory that would fill the device"),
            ("kv_in_use_bytes", "BIGINT", "KV cache memory in use at start-up, bytes"),
        ),
    ),
    Table(
        "log_preemptions",
        "Preemption and retraction events printed per event (v0 warnings, SGLang retractions).",
        LOG_ENVELOPE
        + cols(
            ("event", "VARCHAR", "v0_preempted | sglang_retract"),
            ("request_id", "VARCHAR", "sequence group or request id"),
            ("mode", "VARCHAR", "RECOMPUTE | SWAP | retract"),
            ("cumulative", "BIGINT", "engine's cumulative count (v0 prints every 50th)"),
            ("count", "BIGINT", "requests affected by this event (SGLang #retracted_reqs)"),
            ("ratio_before", "DOUBLE", "SGLang new_token_ratio before"),
            ("ratio_after", "DOUBLE", "SGLang new_token_ratio after"),
            ("tokens_gained", "BIGINT", "tokens a retraction freed (SGLang #new_tokens_gained)"),
        ),
    ),
    Table(
        "log_capacity_errors",
        "Start-up refusals for lack of KV memory, and runtime pool exhaustion errors.",
        LOG_ENVELOPE
        + cols(
            (
                "event",
                "VARCHAR",
                "max_len_exceeds_pool | needs_more_kv | no_cache_blocks | free_below_desired | ...",
            ),
            ("max_model_len", "BIGINT", "the length that does not fit"),
            ("pool_tokens", "BIGINT", "tokens the pool holds (v0 message)"),
            ("needed_gib", "DOUBLE", "KV memory one max-length request needs, GiB"),
            ("available_gib", "DOUBLE", "KV memory available, GiB"),
            ("estimated_max_len", "BIGINT", "largest length the pool could hold, as printed"),
            ("free_gib", "DOUBLE", "free device memory at start, GiB"),
            ("total_gib", "DOUBLE", "device total memory, GiB"),
            ("utilization", "DOUBLE", "requested gpu_memory_utilization"),
            ("requested_gib", "DOUBLE", "requested memory, GiB"),
            ("message", "VARCHAR", "the error text"),
            # SGLang's allocation failures state what was asked and what was left
            ("requested_tokens", "BIGINT", "KV token slots the failed allocation asked for"),
            ("available_tokens", "BIGINT", "free KV token slots at the failure"),
            ("evictable_tokens", "BIGINT", "radix-cache tokens that could have been evicted"),
            ("available_slots", "BIGINT", "free request slots (SGLang req_to_token_pool)"),
            ("requested_slots", "BIGINT", "request slots the failed allocation asked for"),
        ),
    ),
    Table(
        "log_oom",
        "CUDA out-of-memory errors (every torch wording), with the numbers they state.",
        LOG_ENVELOPE
        + cols(
            ("gpu", "INTEGER", "device index"),
            ("tried_bytes", "BIGINT", "allocation that failed"),
            ("total_bytes", "BIGINT", "device capacity"),
            ("free_bytes", "BIGINT", "free at the time"),
            ("process_bytes", "BIGINT", "memory this process held"),
            ("allocated_bytes", "BIGINT", "allocated by PyTorch"),
            ("reserved_unallocated_bytes", "BIGINT", "reserved by PyTorch but unallocated"),
            (
                "other_processes",
                "VARCHAR",
                "JSON list of {pid, bytes} from 'Process N has X in use'",
            ),
            ("event", "VARCHAR", "cuda_oom"),
            ("reserved_bytes", "BIGINT", "reserved in total by PyTorch (torch < 2.1 wording)"),
        ),
    ),
    Table(
        "log_http",
        "HTTP access lines (uvicorn), so rejections (503, 400) can be counted.",
        LOG_ENVELOPE
        + cols(
            ("client", "VARCHAR", "client address"),
            ("method", "VARCHAR", "HTTP method"),
            ("path", "VARCHAR", "request path"),
            ("status", "INTEGER", "HTTP status"),
        ),
    ),
    Table(
        "log_http_counts",
        "HTTP access lines below status 400, counted per process, method, path and status "
        "instead of a row each (log_http keeps a row for each rejection, 400 and above).",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica: pod/host name if printed, else the file's folder"),
            ("process", "VARCHAR", "process name from the (Name pid=N) prefix, if any"),
            ("method", "VARCHAR", "HTTP method"),
            ("path", "VARCHAR", "request path"),
            ("status", "INTEGER", "HTTP status"),
            ("count", "BIGINT", "access lines with this process, method, path and status"),
            ("last_line", "BIGINT", "the last of them (source_line is the first)"),
        ),
    ),
    Table(
        "log_requests",
        "Per-request lines (request logging on): admission with lengths, finish, abort.",
        LOG_ENVELOPE
        + cols(
            ("event", "VARCHAR", "received | finished | aborted"),
            ("request_id", "VARCHAR", "request id"),
            ("prompt_tokens", "BIGINT", "prompt length in tokens"),
            ("max_tokens", "BIGINT", "max_tokens requested"),
        ),
    ),
    Table(
        "log_kv_connector",
        "KV connector lines: LMCache's per-request lookups, stores and loads of the second "
        "KV tier, the connector named at start-up, and P/D transfers that failed or held "
        "blocks until they expired (NIXL, Mooncake, MoRIIO, the offloading connector).",
        LOG_ENVELOPE
        + cols(
            (
                "event",
                "VARCHAR",
                "lookup | store_start | stored | retrieved | init | blocks_expired | "
                "transfer_failed | store_failed",
            ),
            (
                "connector",
                "VARCHAR",
                "the connector that printed the line: lmcache | nixl | mooncake | moriio | "
                "offloading",
            ),
            ("request_id", "VARCHAR", "request id, where printed"),
            ("tokens", "BIGINT", "the request's tokens (Total tokens, out of total N)"),
            (
                "computed_tokens",
                "BIGINT",
                "tokens vLLM's own prefix cache already had (Inference Engine computed tokens)",
            ),
            ("hit_tokens", "BIGINT", "tokens the connector found (LMCache hit tokens, Retrieved)"),
            ("load_tokens", "BIGINT", "tokens it must load into the GPU (need to load, required)"),
            ("stored_tokens", "BIGINT", "tokens stored (Stored N, Storing KV cache for N)"),
            ("gib", "DOUBLE", "size of the KV moved, GiB as printed (gb)"),
            ("ms", "DOUBLE", "time the transfer took, ms"),
            ("blocks", "BIGINT", "KV blocks the line counts (a store the tier refused ...)"),
            ("workers", "INTEGER", "remote (decode) workers that read the blocks before expiry"),
            ("seconds", "DOUBLE", "a timeout or lease the line states, seconds"),
            ("state", "VARCHAR", "the transfer's state or error as printed"),
        ),
    ),
)
