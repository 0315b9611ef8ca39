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
            ("suffix", "VARCHAR", "'' | total | bucket | sum | count | created | info"),
            ("engine", "VARCHAR", "`engine` label (v1), or tp_rank for SGLang"),
            ("model_name", "VARCHAR", "`model_name` label"),
            ("le", "DOUBLE", "histogram bucket bound"),
            ("reason", "VARCHAR", "`reason` label (waiting_by_reason, rejections)"),
            ("labels", "VARCHAR", "all labels as JSON"),
            ("value", "DOUBLE", "sample value"),
            (
                "series",
                "VARCHAR",
                "labels without `le` as JSON: with replica and engine, names one series",
            ),
        ),
    ),
    Table(
        "scrapes",
        "One row per scrape: a scrape body read (origin 'body', samples counted) or an attempt "
        "in a scraper's log (origin 'log', with the error when it failed).",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica"),
            ("ts", "TIMESTAMP", "scrape time (UTC)"),
            ("samples", "BIGINT", "sample lines in the scrape"),
            ("status", "VARCHAR", "ok | error"),
            ("error", "VARCHAR", "what went wrong (connection refused ...)"),
            ("origin", "VARCHAR", "body (read from the scrape itself) | log (a scraper's log)"),
            ("file", "VARCHAR", "the scrape file the attempt wrote, relative to the folder"),
            ("http_status", "INTEGER", "HTTP status of the attempt"),
            ("bytes", "BIGINT", "bytes received"),
            ("duration_s", "DOUBLE", "seconds from request to response"),
        ),
    ),
)
