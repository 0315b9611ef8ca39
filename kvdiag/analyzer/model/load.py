"""Load facts: peak usage, queue, running, preemptions."""

from __future__ import annotations

import polars as pl

from kvdiag.analyzer.model.base import Facts, ref
from kvdiag.analyzer.model.samples import samples
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain.counters import counter_increase
from kvdiag.domain.records.diagnosis import Fact

_LOAD_FACTS: tuple[tuple[str, str, str, str, float], ...] = (
    # fact, canonical metric, stats-line column, unit, stats-line scale to the metric's unit
    ("peak_kv_usage", "kv_cache_usage", "kv_usage_pct", "ratio", 0.01),
    ("max_requests_waiting", "num_requests_waiting", "waiting", "requests", 1.0),
    ("max_requests_running", "num_requests_running", "running", "requests", 1.0),
)


def load_facts(reader: StoreReader, facts: Facts) -> None:
    """Peaks of the load gauges: from metrics when scraped, else from the stats lines."""
    scraped, logged = reader.has_rows("metric_samples"), reader.has_rows("log_stats")
    for name, metric, column, unit, scale in _LOAD_FACTS:
        rows, value_col = pl.DataFrame(), "value"
        if scraped:
            rows = reader.sql(
                "SELECT * FROM metric_samples WHERE metric = ? AND suffix = '' AND value = "
                "(SELECT max(value) FROM metric_samples WHERE metric = ? AND suffix = '') "
                "ORDER BY ts NULLS LAST, source_path, source_line LIMIT 1",
                [metric, metric],
            )
        if rows.is_empty() and logged:
            rows = reader.sql(_first_peak_row(column))
            value_col = column
        if rows.height:
            r = rows.row(0, named=True)
            value = float(r[value_col]) * (scale if value_col == column else 1.0)
            facts[name] = Fact(round(value, 4) if unit == "ratio" else int(value), unit, ref(r))


def _first_peak_row(column: str) -> str:
    """SQL: the first stats line (by time, file, line) holding the column's peak, whole.

    The line is found by its rowid first and read whole after: with every column in the
    sort, DuckDB would read the text of each line at the peak (thousands when usage sits
    at 100 %); this way only the one line's.
    """
    return (
        "SELECT * FROM log_stats WHERE rowid = (SELECT rowid FROM log_stats "
        f"WHERE {column} = (SELECT max({column}) FROM log_stats) "
        "ORDER BY ts NULLS LAST, source_path, source_line LIMIT 1)"
    )


# A retraction is printed by every TP rank of the scheduler group that made it: one event is
# one (time, count, ratios) per replica and DP rank. Lines without a time count one each.
_RETRACTION_EVENT = (
    "replica",
    "dp_rank",
    "source_path",
    "_when",
    "count",
    "ratio_before",
    "ratio_after",
)


def retraction_events(rows: pl.DataFrame) -> pl.DataFrame:
    """log_preemptions rows with SGLang's retraction lines one per event (others untouched)."""
    line = pl.col("source_line").cast(pl.String)
    sglang = pl.col("event") == "sglang_retract"
    when = pl.when(sglang).then(pl.coalesce("ts_raw", line)).otherwise(line)
    return (
        rows.with_columns(when.alias("_when"))
        .unique(subset=list(_RETRACTION_EVENT), keep="first", maintain_order=True)
        .drop("_when")
    )


def preemption_facts(reader: StoreReader, facts: Facts) -> None:
    """Preemptions during the window: the counter's increase, else the stats lines' sum,
    else SGLang's retraction lines (each event once, however many ranks printed it)."""
    series = samples(reader, "num_preemptions", "total")
    if series.height:
        total = counter_increase(series)
        last = series.row(series.height - 1, named=True)
        note = f"increase of {last['name']}"
        facts["preemptions"] = Fact(int(total), "preemptions", ref(last), note)
        return
    rows = pl.DataFrame()
    if reader.has_rows("log_stats"):
        rows = reader.sql(
            "SELECT * FROM log_stats WHERE preemptions IS NOT NULL "
            "ORDER BY source_path, source_line"
        )
    if rows.height:
        last = rows.row(rows.height - 1, named=True)
        facts["preemptions"] = Fact(
            int(rows["preemptions"].sum()), "preemptions", ref(last), "sum of stats lines"
        )
        return
    retractions = _retractions(reader)
    if retractions is not None:
        facts["preemptions"] = retractions


def _retractions(reader: StoreReader) -> Fact | None:
    """SGLang's retraction lines as one preemption count (its own events, once each)."""
    if not reader.has_rows("log_preemptions"):
        return None
    retracted = reader.sql(
        "SELECT * FROM log_preemptions WHERE event = 'sglang_retract' "
        "ORDER BY source_path, source_line"
    )
    if retracted.is_empty():
        return None
    events = retraction_events(retracted)
    last = events.row(events.height - 1, named=True)
    many = "event" if events.height == 1 else "events"
    note = f"retractions (SGLang's preemptions) in {events.height} {many}"
    if events.height < retracted.height:
        note += f", printed {retracted.height} times across TP ranks"
    return Fact(int(events["count"].fill_null(1).sum()), "preemptions", ref(last), note)
