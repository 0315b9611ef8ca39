"""Tables filled from Prometheus metrics (text scrapes, API exports, Grafana CSV)."""

from __future__ import annotations

from kvdiag.analyzer.schema.base import PROVENANCE, Table, cols

# What names a series: these are stored once per distinct series (metric_series), the
# rest once per sample (metric_points). `le` is part of a bucket's series, as in Prometheus.
SERIES_COLUMNS = cols(
    ("replica", "VARCHAR", "the `instance` label, else the folder or file the scrape came from"),
    ("metric", "VARCHAR", "canonical name (see metric_aliases.toml)"),
    ("name", "VARCHAR", "name as exposed, e.g. vllm:num_preemptions_total"),
    ("suffix", "VARCHAR", "'' | total | bucket | sum | count | created | info"),
    ("engine", "VARCHAR", "`engine` label (v1), or tp_rank for SGLang"),
    ("model_name", "VARCHAR", "`model_name` label"),
    ("le", "DOUBLE", "histogram bucket bound"),
    ("reason", "VARCHAR", "`reason` label (waiting_by_reason, rejections)"),
    ("labels", "VARCHAR", "all labels as JSON"),
    (
        "series",
        "VARCHAR",
        "labels without `le` as JSON: with replica and engine, names one series",
    ),
)
# An optional column of metric_samples batches, not stored: a 64-bit key equal on the rows
# of one series within the batch. An ingester that knows it cheaply (the exposition parser:
# a series is its `name{labels}` head) saves the store finding it from the ten columns.
SERIES_HINT = "_series_hint"
# With the hint, optionally: the text the row's line starts with that names its series
# (`name{labels}` as exposed). The store keeps it once and only the rest of each line.
SERIES_HEAD = "_series_head"
SERIES_ID = cols(("series_id", "INTEGER", "the series (metric_series.series_id)"))
HEAD = cols(
    ("head", "VARCHAR", "the text each sample line of the series starts with (NULL: unknown)")
)
POINT_COLUMNS = PROVENANCE[:2] + cols(
    ("raw", "VARCHAR", "the line as read, or (`tail`) what follows its series' head in it"),
    ("ts", "TIMESTAMP", "scrape time (UTC) from the file name, a marker line or the sample"),
    ("value", "DOUBLE", "sample value"),
)
_TAIL = cols(("tail", "BOOLEAN", "`raw` is the line after its series' head"))
_SAMPLES = {c.name: c for c in POINT_COLUMNS + SERIES_COLUMNS + PROVENANCE}
# The order metric_samples had when it was one table: saved databases' `SELECT *` keep it.
_SAMPLE_ORDER = [
    "source_path",
    "source_line",
    "raw",
    "replica",
    "ts",
    "metric",
    "name",
    "suffix",
    "engine",
    "model_name",
    "le",
    "reason",
    "labels",
    "value",
    "series",
]
_POINT_NAMES = {c.name for c in POINT_COLUMNS}
_VIEW_COLUMNS = {n: f"{'p' if n in _POINT_NAMES else 's'}.{n}" for n in _SAMPLE_ORDER} | {
    "raw": "CASE WHEN p.tail THEN s.head || p.raw ELSE p.raw END AS raw"
}

METRIC_TABLES: tuple[Table, ...] = (
    Table(
        "metric_series",
        "One row per series of metric_samples (a metric's label set, `le` included): what "
        "names it, stored once rather than on each of its samples.",
        SERIES_ID + SERIES_COLUMNS + HEAD,
        part_of="metric_samples",
    ),
    Table(
        "metric_points",
        "The samples of metric_samples: their series, time, value and provenance.",
        POINT_COLUMNS + SERIES_ID + _TAIL,
        part_of="metric_samples",
    ),
    Table(
        "metric_samples",
        "Prometheus samples of the metrics kvdiag knows (canonical names), one row per sample "
        "(a view joining metric_points to metric_series).",
        tuple(_SAMPLES[n] for n in _SAMPLE_ORDER)
        + cols(("sample_row", "BIGINT", "the sample's rowid in metric_points")),
        view=(
            "SELECT " + ", ".join(_VIEW_COLUMNS.values()) + ", p.rowid AS sample_row "
            "FROM metric_points p JOIN metric_series s USING (series_id)"
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
