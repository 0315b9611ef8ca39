"""Tables filled from the model's config.json and from client-side request logs."""

from __future__ import annotations

from kvdiag.analyzer.schema.base import PROVENANCE, Table, cols

MODEL_TABLES: tuple[Table, ...] = (
    Table(
        "model_config",
        "The model's architecture as its config.json states it (text_config flattened in).",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica"),
            ("architecture", "VARCHAR", "architectures[0]"),
            ("model_type", "VARCHAR", "model_type"),
            ("num_layers", "INTEGER", "num_hidden_layers"),
            ("num_attention_heads", "INTEGER", "attention heads"),
            ("num_kv_heads", "INTEGER", "num_key_value_heads (= attention heads when absent)"),
            ("head_dim", "INTEGER", "head_dim, else hidden_size / num_attention_heads"),
            ("hidden_size", "INTEGER", "hidden_size"),
            ("dtype", "VARCHAR", "torch_dtype / dtype"),
            ("max_position_embeddings", "BIGINT", "max_position_embeddings"),
            ("sliding_window", "BIGINT", "sliding window length, when any layer uses one"),
            ("sliding_layers", "INTEGER", "layers using the sliding window"),
            ("full_attention_layers", "INTEGER", "layers with full attention"),
            ("linear_layers", "INTEGER", "Mamba / linear-attention layers (no per-token KV)"),
            ("kv_lora_rank", "INTEGER", "MLA latent rank (DeepSeek)"),
            ("qk_rope_head_dim", "INTEGER", "MLA rope dim (DeepSeek)"),
            ("layer_types", "VARCHAR", "JSON list of per-layer attention types, when given"),
            ("model_path", "VARCHAR", "where the config came from: the launch.txt heading's path"),
            ("text_config_key", "VARCHAR", "text_config, llm_config ... when nested there"),
        ),
    ),
    Table(
        "client_requests",
        "Client-side request log (one JSON object per request, e.g. a load generator's).",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica"),
            ("request_id", "VARCHAR", "request id"),
            ("phase", "VARCHAR", "load phase or tag"),
            ("send_ts", "TIMESTAMP", "when the request was sent (UTC)"),
            ("first_token_ts", "TIMESTAMP", "first token received"),
            ("end_ts", "TIMESTAMP", "response finished"),
            ("prompt_tokens", "BIGINT", "prompt length (server-counted when available)"),
            ("max_tokens", "BIGINT", "max_tokens requested"),
            ("completion_tokens", "BIGINT", "tokens generated"),
            ("ttft_s", "DOUBLE", "time to first token, s"),
            ("e2e_s", "DOUBLE", "end-to-end latency, s"),
            ("http_status", "INTEGER", "HTTP status"),
            ("status", "VARCHAR", "ok | http_error | timeout | ..."),
            ("finish_reason", "VARCHAR", "length | stop | ..."),
            ("error", "VARCHAR", "client-side error text, when the request failed"),
        ),
    ),
)
