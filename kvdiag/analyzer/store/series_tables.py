"""Metric samples stored as series and points: what names a series once, a number per sample.

A day of one-second scrapes is tens of millions of samples, each naming its series with the
same ten columns (replica, metric, name, labels ...) scrape after scrape. Storing those
strings on every row was most of DuckDB's insert time, so the store keeps each distinct
series once in `metric_series` and each sample in `metric_points` with its series' id; the
view `metric_samples` joins them back, and nearly everything reads that. Two queries read the
parts (the charts' p99 in facts/chart_series.py, the reset check in timeline.py): they number
the series from `metric_series` first so that their windows over every point sort integers.
"""

from __future__ import annotations

from typing import NamedTuple

import polars as pl

from kvdiag.analyzer.schema import table
from kvdiag.analyzer.schema.metrics import SERIES_COLUMNS, SERIES_HEAD, SERIES_HINT
from kvdiag.analyzer.schema.sample_tail import TAIL, cut_heads

SAMPLES, SERIES, POINTS = "metric_samples", "metric_series", "metric_points"

_POLARS_TYPES = {"VARCHAR": pl.String, "DOUBLE": pl.Float64}
_SERIES_SCHEMA = pl.Schema(
    {c.name: _POLARS_TYPES[c.type] for c in SERIES_COLUMNS} | {"head": pl.String}
)
_KEYS = list(_SERIES_SCHEMA)  # the head too: the same labels exposed as another text
_ID = "series_id"


class SplitSamples(NamedTuple):
    new_series: pl.DataFrame  # metric_series rows first seen in this batch
    points: pl.DataFrame  # metric_points rows, in the batch's order
    known: pl.DataFrame  # the catalog once both are stored (see SeriesCatalog.accept)


class SeriesCatalog:
    """The series seen so far in a store, each with its id; splits batches of samples."""

    def __init__(self) -> None:
        self._known = pl.DataFrame(schema={_ID: pl.Int32, **_SERIES_SCHEMA})
        # Ids are never handed out twice, even when the batch that drew them is not stored:
        # its series rows may be, without its points.
        self._next_id = 0

    def split(self, samples: pl.DataFrame, series: pl.DataFrame | None = None) -> SplitSamples:
        """`samples` (metric_samples columns, missing ones NULL; SERIES_HINT and SERIES_HEAD
        optional) as the series first seen here and the points, grouped by series (in the
        batch's order within each).

        With `series` (a row per SERIES_HINT: the series columns and SERIES_HEAD), `samples`
        holds the point columns and SERIES_HINT only, and `tail` when its lines are cut.
        """
        if series is None:
            samples = _with_hint(_with_series_columns(samples))
            seen = samples.unique(subset=SERIES_HINT, keep="first", maintain_order=True)
        else:
            seen = _with_hint(_with_series_columns(series))
            samples = _with_hint(samples)
        if TAIL not in samples.columns:  # else the ingester cut the lines (sample_tail.py)
            if "head" not in samples.columns:
                samples = samples.join(
                    seen.select(SERIES_HINT, "head"),
                    on=SERIES_HINT,
                    how="left",
                    maintain_order="left",
                )
            samples = cut_heads(samples)
        new, ids = self._assign(seen.select(SERIES_HINT, *_KEYS))
        # A column looked up, not a join: the points' one copy is the one _by_series makes.
        series_id = samples[SERIES_HINT].replace_strict(
            ids[SERIES_HINT], ids[_ID], default=None, return_dtype=pl.Int32
        )
        if series_id.null_count():
            raise ValueError(f"{SAMPLES}: rows whose {SERIES_HINT} names no row of the series")
        points = samples.with_columns(series_id.alias(_ID))
        declared = table(POINTS).column_names
        return SplitSamples(
            new,
            _by_series(points.select(c for c in declared if c in points.columns)),
            pl.concat([self._known, new]),
        )

    def accept(self, split: SplitSamples) -> None:
        """Remember a split's new series once they and their points are stored: a batch
        whose insert failed must not leave the catalog naming series the store lacks."""
        self._known = split.known

    def _assign(self, seen: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Ids for one batch's distinct series (a few hundred rows): known ones keep theirs,
        new ones get the next. Returns (new metric_series rows, SERIES_HINT -> series_id)."""
        # In the batch's order: a metric's series, adjacent in a scrape, get adjacent ids.
        matched = seen.join(
            self._known, on=_KEYS, how="left", nulls_equal=True, maintain_order="left"
        )
        fresh = matched.filter(pl.col(_ID).is_null())
        new = (
            fresh.drop(_ID, SERIES_HINT)
            .with_row_index(_ID, offset=self._next_id)
            .cast({_ID: pl.Int32})
            .select(self._known.columns)
        )
        self._next_id += new.height
        fresh_ids = fresh.select(SERIES_HINT, new[_ID])
        ids = pl.concat(
            [matched.filter(pl.col(_ID).is_not_null()).select(SERIES_HINT, _ID), fresh_ids]
        )
        return new, ids


def _by_series(points: pl.DataFrame) -> pl.DataFrame:
    """A batch's points grouped by series, each series' in the batch's order.

    A scrape holds every series, so points stored in scrape order mix all series in every
    stretch of the table, and a query for one metric reads all of it. Grouped, each stretch
    holds a few series (a metric's are adjacent: SeriesCatalog numbers them in scrape
    order), and DuckDB skips the rest by their series_id ranges, which makes the facts,
    rules and charts of a long scrape series markedly faster.
    """
    # On one thread: polars' threads cost more CPU than they share out on two cores, both
    # busy during ingestion.
    return points.sort(_ID, maintain_order=True, multithreaded=False)


def _with_series_columns(samples: pl.DataFrame) -> pl.DataFrame:
    samples = samples.rename({SERIES_HEAD: "head"}, strict=False)
    missing = [
        pl.lit(None, dtype).alias(name)
        for name, dtype in _SERIES_SCHEMA.items()
        if name not in samples.columns
    ]
    return samples.with_columns(missing).cast(_SERIES_SCHEMA)


def _with_hint(samples: pl.DataFrame) -> pl.DataFrame:
    """The batch with SERIES_HINT: the ingester's, else a dense index of the distinct series
    (exact, and the costly way: a join on the ten columns)."""
    if SERIES_HINT in samples.columns:
        return samples.with_columns(pl.col(SERIES_HINT).cast(pl.UInt64))
    distinct = samples.select(_KEYS).unique(maintain_order=True).with_row_index(SERIES_HINT)
    return samples.join(
        distinct.cast({SERIES_HINT: pl.UInt64}),
        on=_KEYS,
        how="left",
        nulls_equal=True,
        maintain_order="left",
    )
