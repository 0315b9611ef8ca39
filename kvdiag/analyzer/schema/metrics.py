"""Tables filled from Prometheus metrics (text scrapes, API exports, Grafana CSV)."""

from __future__ import annotations

from kvdiag.analyzer.schema.base import PROVENANCE, SCRAPE_ENVELOPE, Table, cols

METRIC_TABLES: tuple[Table, ...] = (
    Table(
        "metric_samples",
        "Prometheus samples of the metrics kvdiag knows (canonical names), one row per sample.",
        SCRAPE_ENVELOPE
        + cols(
            ("metric", "VARCHAR", "canonical name (see metric_aliases.toml)"),
            ("name", "VARCHAR", "name as exposed, e.g. vllm:num_preemptions_total"),
            ("suffix", "VARCHAR", "'' | bucket | sum | count | created"),
            ("engine", "VARCHAR", "`engine` label (v1), or tp_rank for SGLang"),
            ("model_name", "VARCHAR", "`model_name` label"),
            ("le", "DOUBLE", "histogram bucket bound"),
            ("reason", "VARCHAR", "`reason` label (waiting_by_reason, rejections)"),
            ("labels", "VARCHAR", "all labels as JSON"),
            ("value", "DOUBLE", "sample value"),
        ),
    ),
    Table(
        "scrapes",
        "One row per scrape attempt: when, from which file, how many samples, or the error.",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica"),
            ("ts", "TIMESTAMP", "scrape time (UTC)"),
            ("samples", "BIGINT", "sample lines in the scrape"),
            ("status", "VARCHAR", "ok | error"),
            ("error", "VARCHAR", "what went wrong (connection refused ...)"),
        ),
    ),
)
