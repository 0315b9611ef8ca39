"""What vLLM v1 says of where prompt KV came from and of the engine's sleep.

- `vllm:prompt_tokens_by_source` (0.17.1+) splits prompt tokens by where their KV came
  from: prefilled here, this engine's prefix cache, or a KV connector (LMCache, NIXL, an
  offload tier). A fact only when some tokens did not come from local compute: a server
  that computes every prompt says nothing new by it.
- `vllm:engine_sleep_state` (0.11.2+): an engine put to sleep (`--enable-sleep-mode`)
  drops its KV pool; usage while asleep is no load, and a pool that "emptied" then did not
  drain. A fact only when the engine slept.
"""

from __future__ import annotations

import polars as pl

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.model.samples import SqlReader
from kvdiag.domain.counters import counter_increase
from kvdiag.domain.records.diagnosis import Fact, SourceRef

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
_LEVELS = {"weights_offloaded": 1, "discard_all": 2}


def _label(name: str) -> pl.Expr:
    return pl.col("labels").str.json_path_match(f"$.{name}")


# Numbers and the series' hash only, the label a fact reads joined from each series' labels
# once: a day of scrapes is hundreds of thousands of samples of each of these metrics, and
# every column of metric_samples (the labels' text on every row) made the facts' peak.
_ROWS = (
    "SELECT replica, engine, hash(series) AS series, ts, value, sample_row "
    "FROM metric_samples WHERE metric = ? AND suffix = ? "
    "ORDER BY replica, engine, series, ts NULLS FIRST, source_path, source_line"
)
_LABELS = (
    "SELECT DISTINCT hash(series) AS series, labels FROM metric_samples "
    "WHERE metric = ? AND suffix = ?"
)
_CITED = "SELECT source_path, source_line FROM metric_samples WHERE sample_row = ?"


def _labelled(reader: SqlReader, metric: str, suffix: str, label: str) -> pl.DataFrame:
    """The metric's samples (replica, engine, series, ts, value, sample_row) with one label."""
    if not reader.has_rows("metric_samples"):
        return pl.DataFrame()
    rows = reader.sql(_ROWS, [metric, suffix])
    if rows.is_empty():
        return rows
    labels = reader.sql(_LABELS, [metric, suffix]).select("series", _label(label).alias(label))
    return rows.join(labels, on="series", how="left", maintain_order="left")


def _cited(reader: SqlReader, sample_row: int) -> SourceRef:
    return ref(reader.sql(_CITED, [sample_row]).row(0, named=True))


def prompt_source_facts(reader: SqlReader, facts: Facts) -> None:
    """prompt_tokens_computed_share: the share of prompt tokens prefilled here, per replica."""
    rows = _labelled(reader, "prompt_tokens_by_source", "total", "source")
    if rows.is_empty():
        return
    replicas = rows["replica"].unique(maintain_order=True).to_list()
    found = []
    for replica in replicas:
        fact = _computed_share(reader, rows.filter(pl.col("replica") == replica))
        if fact is not None:
            scope = (("replica", str(replica)),) if len(replicas) > 1 else ()
            found.append(Fact(fact.value, fact.unit, fact.source, fact.note, scope))
    if found:
        facts["prompt_tokens_computed_share"] = found[0] if len(found) == 1 else tuple(found)


def _computed_share(reader: SqlReader, rows: pl.DataFrame) -> Fact | None:
    grown = {s: counter_increase(rows.filter(pl.col("source") == s)) for s in SOURCES}
    total = sum(grown.values())
    if total <= 0 or grown["local_compute"] >= total:
        return None
    parts = ", ".join(f"{s} {grown[s]:,.0f}" for s in SOURCES)
    note = f"prompt tokens by source over the window: {parts} (vllm:prompt_tokens_by_source)"
    last = _cited(reader, int(rows["sample_row"][-1]))
    return Fact(round(grown["local_compute"] / total, 4), "ratio", last, note)


def sleep_facts(reader: SqlReader, facts: Facts) -> None:
    """engine_slept: the deepest sleep level seen, with the first and last moment asleep."""
    rows = _labelled(reader, "engine_sleep_state", "", "sleep_state")
    if rows.is_empty():
        return
    rows = rows.rename({"sleep_state": "state"})
    awake = (pl.col("state") == "awake") & (pl.col("value") == 0)
    asleep = rows.filter(awake).sort("ts", maintain_order=True)
    if asleep.is_empty():
        return
    levels = rows.filter(pl.col("state").is_in(list(_LEVELS)) & (pl.col("value") > 0))
    level = max((_LEVELS[s] for s in levels["state"].to_list()), default=None)
    first, last = asleep.row(0, named=True), asleep.row(asleep.height - 1, named=True)
    when = f"asleep in {asleep.height} samples from {first['ts']} to {last['ts']}"
    what = f"sleep level {level}" if level else "sleep level not stated"
    note = f"{when} ({what}): the KV pool is dropped while asleep; usage then is no load"
    facts["engine_slept"] = Fact(level or 0, "level", _cited(reader, first["sample_row"]), note)
