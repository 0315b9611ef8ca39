"""Store rows from parsed metric samples, shared by every metric ingester.

An ingester (exposition text, Prometheus API JSON, Grafana CSV) brings a frame of samples
with provenance and a `head` (`name{labels}` as exposition text); `SampleBuilder` resolves
the heads through the alias table once per distinct head (the exposition parser resolves
them itself, per distinct line, and calls `shape`) and shapes three tables:
metric_samples (a row of numbers and provenance per sample, and what names each sample's
series once per head: the store keeps them apart, see store/series_tables.py), config (the labels
of vllm:cache_config_info) and gpu_snapshots (dcgm-exporter's framebuffer gauges).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from kvdiag.analyzer.ingest.base import TableBatch, template_expr
from kvdiag.analyzer.ingest.metrics.exposition_parse import parse_heads
from kvdiag.analyzer.ingest.rows import MAX_RAW
from kvdiag.analyzer.schema import table
from kvdiag.analyzer.schema.aliases import AliasTable
from kvdiag.analyzer.schema.metrics import SERIES_HEAD, SERIES_HINT
from kvdiag.analyzer.schema.sample_tail import TAIL, whole_line
from kvdiag.domain.records.diagnosis import UnmatchedTemplate

_GPU_METRICS = {
    "gpu_fb_total": "memory_total_mib",
    "gpu_fb_used": "memory_used_mib",
    "gpu_fb_free": "memory_free_mib",
    "gpu_fb_reserved": "memory_reserved_mib",
    "gpu_utilization": "utilization_pct",
}
_GPU_LABELS = {"gpu": "gpu", "uuid": "UUID", "host": "Hostname", "host2": "hostname"}


@dataclass(frozen=True, slots=True)
class Resolved:
    """The store rows made from one batch of samples."""

    samples: pl.DataFrame  # metric_samples' point columns, SERIES_HINT naming the series
    series: pl.DataFrame  # SERIES_HINT, SERIES_HEAD and the series columns, a row per hint
    config: pl.DataFrame
    gpus: pl.DataFrame
    unknown_heads: pl.Series  # heads that name no known metric (not stored)

    def batches(self) -> Iterator[TableBatch]:
        """What is to be stored, table by table (metric_samples with its series)."""
        if self.samples.height:
            yield TableBatch("metric_samples", self.samples, self.series)
        for name, frame in (("config", self.config), ("gpu_snapshots", self.gpus)):
            if frame.height:
                yield TableBatch(name, frame)


@dataclass
class SampleBuilder:
    """Turns sample frames into store rows; remembers config already emitted."""

    aliases: AliasTable
    replica: str
    _seen_config: set[tuple[str | None, ...]] = field(default_factory=set)

    def build(self, samples: pl.DataFrame) -> Resolved:
        """`samples`: source_path, source_line, raw, ts, head, value, and optionally `scrape`
        (an id that tells scrapes apart when their time is unknown)."""
        heads, pairs = parse_heads(samples["head"], self.aliases)
        points = (
            samples.join(
                heads.select("head", "head_id"), on="head", how="inner", maintain_order="left"
            )
            .drop("head")
            .with_columns(pl.col("raw").str.slice(0, MAX_RAW))
        )
        all_heads = samples["head"].unique(maintain_order=True)
        unknown = all_heads.filter(~all_heads.is_in(heads["head"].implode()))
        return self.shape(points, heads, pairs, unknown)

    def shape(
        self,
        points: pl.DataFrame,
        heads: pl.DataFrame,
        pairs: pl.DataFrame,
        unknown_heads: pl.Series | None = None,
    ) -> Resolved:
        """Store rows from samples whose heads are already resolved: `points` has head_id
        (a row of `heads`, parse_heads' first frame), source_path, source_line, raw (at most
        MAX_RAW characters of the line, cut after its head where `tail` says so), ts, value
        and optionally `scrape`. What names a series is worked out once per head."""
        named = [
            pl.when(pl.any_horizontal(*(pl.col("name").str.starts_with(p) for p in prefixes))).then(
                pl.col(f"label_{label}")
            )
            for label, prefixes in self.aliases.replica_labels
        ]
        heads = heads.with_columns(pl.coalesce(*named, pl.lit(self.replica)).alias("replica"))
        return Resolved(
            _point_rows(points),
            _series_rows(heads),
            self._config_rows(_of_metrics(points, heads, ["cache_config_info"]), pairs),
            _gpu_rows(_of_metrics(points, heads, list(_GPU_METRICS)), self.replica),
            unknown_heads if unknown_heads is not None else pl.Series("head", [], pl.String),
        )

    def _config_rows(self, info: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
        """Every cache_config_info label as a config row, first sighting per value only."""
        if info.is_empty():
            return pl.DataFrame()
        rows = (
            info.select(
                "source_path",
                "source_line",
                "raw",
                "replica",
                "head",
                pl.col("name").str.extract(r"(vllm|sglang)", 1).alias("engine"),
                pl.col("label_engine").alias("_engine_index"),
            )
            .join(pairs, on="head", how="inner", maintain_order="left")
            .unique(
                subset=["replica", "_engine_index", "key", "value"],
                keep="first",
                maintain_order=True,
            )
        )
        keys = list(rows.select("replica", "_engine_index", "key", "value").iter_rows())
        fresh = [k not in self._seen_config for k in keys]
        self._seen_config.update(keys)
        return rows.filter(pl.Series(fresh, dtype=pl.Boolean)).select(
            "source_path",
            "source_line",
            "raw",
            "replica",
            "key",
            "value",
            pl.lit("metrics").alias("origin"),
            "engine",
        )


def _of_metrics(points: pl.DataFrame, heads: pl.DataFrame, metrics: list[str]) -> pl.DataFrame:
    """The samples of a few metrics with their heads' columns, in the batch's order."""
    chosen = heads.filter(pl.col("metric").is_in(metrics))
    if chosen.is_empty():
        return pl.DataFrame()
    rows = points.join(chosen, on="head_id", how="inner", maintain_order="left")
    if TAIL in rows.columns:  # config and GPU rows cite the whole line
        rows = rows.with_columns(whole_line(pl.col("head")).alias("raw"))
    return rows


def _point_rows(points: pl.DataFrame) -> pl.DataFrame:
    return points.select(
        pl.col("head_id").alias(SERIES_HINT),
        "source_path",
        "source_line",
        "raw",
        pl.col("ts").cast(pl.Datetime("us")),
        pl.col("value").cast(pl.Float64),
        *([TAIL] if TAIL in points.columns else []),
    )


def _series_rows(heads: pl.DataFrame) -> pl.DataFrame:
    """The store's series key (see SERIES_HINT) and what it names: within a batch every
    column naming a row's series comes from its head (`name{labels}`; the replica is the
    first of the alias table's replica labels present, else the builder's), and parse_heads
    numbers the distinct heads of a batch."""
    engine = pl.col("label_engine")
    out = heads.select(
        pl.col("head_id").alias(SERIES_HINT),
        pl.col("head").alias(SERIES_HEAD),
        "replica",
        "metric",
        "name",
        "suffix",
        pl.coalesce(pl.when(engine != "").then(engine), pl.col("label_tp_rank")).alias("engine"),
        pl.coalesce(pl.col("label_model_name"), pl.col("label_name")).alias("model_name"),
        pl.col("label_le").cast(pl.Float64, strict=False).alias("le"),
        pl.col("label_reason").alias("reason"),
        "labels",
        "series",
    )
    assert set(out.columns) <= {*table("metric_samples").column_names, SERIES_HINT, SERIES_HEAD}
    return out


def _gpu_rows(dcgm: pl.DataFrame, default_replica: str) -> pl.DataFrame:
    """dcgm-exporter FB gauges of one scrape and GPU become one gpu_snapshots row."""
    if dcgm.is_empty():
        return pl.DataFrame()
    scrape = pl.col("scrape") if "scrape" in dcgm.columns else pl.lit(None, pl.Int64)
    labels = {k: pl.col("labels").str.json_path_match(f"$.{v}") for k, v in _GPU_LABELS.items()}
    dcgm = dcgm.with_columns(
        scrape.alias("_scrape"),
        labels["gpu"].cast(pl.Int32, strict=False).alias("gpu"),
        labels["uuid"].alias("uuid"),
        pl.coalesce(labels["host"], labels["host2"], pl.col("label_instance")).alias("host"),
        pl.col("labels").str.json_path_match("$.modelName").alias("name"),
        pl.coalesce(pl.col("labels").str.json_path_match("$.pod"), pl.lit(default_replica)).alias(
            "gpu_replica"
        ),
    ).sort("source_path", "source_line")
    keys = ["source_path", "_scrape", "ts", "gpu", "uuid", "host", "gpu_replica"]
    values = [
        pl.col("value").filter(pl.col("metric") == m).first().alias(col)
        for m, col in _GPU_METRICS.items()
    ]
    grouped = dcgm.group_by(keys, maintain_order=True).agg(
        pl.col("source_line").first(), pl.col("raw").first(), pl.col("name").first(), *values
    )
    return grouped.select(
        "source_path",
        "source_line",
        "raw",
        pl.col("gpu_replica").alias("replica"),
        "host",
        "ts",
        "gpu",
        "uuid",
        "name",
        *_GPU_METRICS.values(),
        pl.lit("dcgm").alias("source_kind"),
    )


@dataclass
class TemplateTally:
    """Unmatched lines grouped by shape across batches, bounded in size."""

    limit: int = 500
    rows: dict[str, list[int | str]] = field(default_factory=dict)  # template -> [n, line, ex]

    def add(self, unmatched: pl.DataFrame, text: str = "text", line: str = "source_line") -> None:
        if unmatched.is_empty():
            return
        grouped = (
            unmatched.with_columns(template_expr(text).alias("_t"))
            .group_by("_t")
            .agg(pl.len(), pl.col(line).min(), pl.col(text).first())
        )
        for tpl, n, first, example in grouped.iter_rows():
            key = tpl if tpl in self.rows or len(self.rows) < self.limit else "<other shapes>"
            row = self.rows.setdefault(key, [0, first, example[:300]])
            row[0] = int(row[0]) + n

    def top(self, k: int = 20) -> tuple[UnmatchedTemplate, ...]:
        ranked = sorted(self.rows.items(), key=lambda kv: (-int(kv[1][0]), int(kv[1][1])))
        return tuple(
            UnmatchedTemplate(t, int(c), int(ln), str(ex)) for t, (c, ln, ex) in ranked[:k]
        )
