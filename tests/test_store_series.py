"""metric_samples is stored as series + points and read back through a view: what goes in
comes out, row for row, whether or not the ingester gave a series hint."""

from __future__ import annotations

import math
from collections.abc import Iterator

import polars as pl
import pytest

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.base import IngestContext, TableBatch
from kvdiag.analyzer.ingest.metrics.exposition import PromTextIngester
from kvdiag.analyzer.schema.metrics import SERIES_COLUMNS, SERIES_HEAD, SERIES_HINT
from kvdiag.analyzer.schema.sample_tail import TAIL, whole_line
from kvdiag.analyzer.store.database import Store
from tests.metric_support import copy_real_scrapes

HINTS = [SERIES_HINT, SERIES_HEAD]
SERIES_KEYS = [c.name for c in SERIES_COLUMNS]


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store()
    try:
        yield s
    finally:
        s.finish()


@pytest.fixture(scope="module")
def real_batches(tmp_path_factory: pytest.TempPathFactory) -> list[TableBatch]:
    """metric_samples batches of 40 real scrapes as the exposition ingester emits them."""
    root = tmp_path_factory.mktemp("scrapes")
    copy_real_scrapes(root, 40)
    found = discover(root)
    ctx = IngestContext(found.root, None, found.anchor, found.anchor_source)
    (unit,) = found.units
    return [
        e
        for e in PromTextIngester().ingest(unit, ctx)
        if isinstance(e, TableBatch) and e.table == "metric_samples"
    ]


def _flat(batch: TableBatch) -> pl.DataFrame:
    """A batch's rows with their series' columns and whole lines on every row (and the
    hints): what an ingester that does not cut lines nor keep series apart hands over."""
    assert batch.series is not None
    assert batch.series[SERIES_HINT].is_unique().all()
    frame = batch.frame.join(batch.series, on=SERIES_HINT, how="left", maintain_order="left")
    return frame.with_columns(whole_line(pl.col(SERIES_HEAD)).alias("raw")).drop(TAIL)


def _stored(store: Store) -> pl.DataFrame:
    """The stored samples in file and line order (a batch's points are stored by series)."""
    return store.reader.sql(
        "SELECT * EXCLUDE (sample_row) FROM metric_samples "
        "ORDER BY source_path, source_line, sample_row"
    )


def _in_file_order(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("source_path", "source_line", maintain_order=True)


@pytest.mark.parametrize("form", ["apart", "hint", "no-hint"])
def test_real_samples_come_back_row_for_row(
    store: Store, real_batches: list[TableBatch], form: str
) -> None:
    batches = real_batches * 2  # every series seen again in a later batch
    for batch in batches:
        if form == "apart":  # as the ingester emits them: the series once per head
            assert set(batch.frame.columns) & set(SERIES_KEYS) == set()
            assert batch.frame[TAIL].all()  # every line cut after its head by the parser
            store.append("metric_samples", batch.frame, batch.series)
        else:  # the series' columns on every row, with or without the hint
            flat = _flat(batch)
            store.append("metric_samples", flat if form == "hint" else flat.drop(HINTS))
    expected = _in_file_order(pl.concat([_flat(b) for b in batches]).drop(HINTS))
    stored = _stored(store)
    assert stored.equals(expected.select(stored.columns))
    assert store.reader.count("metric_series") == expected.select(SERIES_KEYS).unique().height
    assert store.reader.count("metric_points") == expected.height
    # With the head known, a point keeps only what follows it: ` 0.5`, not the whole line.
    tails = store.reader.scalar("SELECT count(*) FROM metric_points WHERE tail")
    assert tails == (0 if form == "no-hint" else expected.height)


def test_a_batch_is_stored_series_by_series_each_in_file_order(
    store: Store, real_batches: list[TableBatch]
) -> None:
    first, again = real_batches[0], real_batches[0]
    store.append("metric_samples", first.frame, first.series)
    store.append("metric_samples", again.frame, again.series)
    rows = store.reader.sql(
        "SELECT p.rowid // ? AS batch, p.series_id, s.metric, p.source_line "
        "FROM metric_points p JOIN metric_series s USING (series_id) ORDER BY p.rowid",
        [first.frame.height],
    )
    assert rows.height == 2 * first.frame.height
    for _, part in rows.group_by("batch", maintain_order=True):
        # one stretch per series, in series order, each in file (here: line) order
        assert part["series_id"].is_sorted()
        assert (
            part.group_by("series_id")
            .agg(pl.col("source_line").is_sorted().all())["source_line"]
            .all()
        )
        # the stretches of a metric's series are adjacent: a query for it reads one stretch
        metrics = part["metric"].rle()
        assert metrics.struct.field("value").is_unique().all()
    # a scrape's lines were not in series order: the grouping did something
    assert not first.frame[SERIES_HINT].is_sorted()


def test_points_whose_hint_names_no_series_are_refused(
    store: Store, real_batches: list[TableBatch]
) -> None:
    batch = real_batches[0]
    assert batch.series is not None
    with pytest.raises(ValueError, match="names no row of the series"):
        store.append("metric_samples", batch.frame, batch.series.slice(1))


def test_series_keep_their_id_across_batches_and_nulls_and_nan_name_one_series(
    store: Store,
) -> None:
    def rows(values: list[float], le: float | None, engine: str | None) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "source_path": "m.prom",
                "source_line": list(range(1, len(values) + 1)),
                "raw": [f"x {v}" for v in values],
                "replica": "r",
                "metric": "kv_cache_usage",
                "name": "vllm:kv_cache_usage_perc",
                "suffix": "",
                "engine": engine,
                "le": le,
                "value": values,
            },
            schema_overrides={"engine": pl.String, "le": pl.Float64},
        )

    store.append("metric_samples", rows([0.1, 0.2], math.nan, None))
    store.append("metric_samples", rows([0.3], math.nan, None))  # same series (NaN, NULL)
    store.append("metric_samples", rows([0.4], 1.0, "0"))  # a new one
    got = store.reader.sql(
        "SELECT p.value, p.series_id FROM metric_points p ORDER BY p.rowid"
    ).rows()
    assert got == [(0.1, 0), (0.2, 0), (0.3, 0), (0.4, 1)]
    assert store.reader.count("metric_series") == 2
    assert store.reader.sql("SELECT value FROM metric_samples ORDER BY sample_row")[
        "value"
    ].to_list() == [0.1, 0.2, 0.3, 0.4]


def test_the_stored_parts_are_written_through_the_view_only(store: Store) -> None:
    frame = pl.DataFrame({"source_path": ["m.prom"], "value": [1.0], "series_id": [0]})
    with pytest.raises(ValueError, match="written by appending to metric_samples"):
        store.append("metric_points", frame)


def test_a_cited_sample_reads_its_text_back_by_sample_row(
    store: Store, real_batches: list[TableBatch]
) -> None:
    for batch in real_batches:
        store.append("metric_samples", batch.frame, batch.series)
    row = store.reader.sql(
        "SELECT sample_row, raw FROM metric_samples WHERE metric = 'kv_cache_usage' "
        "ORDER BY ts DESC LIMIT 1"
    ).row(0)
    back = store.reader.scalar("SELECT raw FROM metric_samples WHERE sample_row = ?", [row[0]])
    assert back == row[1]
    assert back.startswith("vllm:kv_cache_usage_perc")


def test_a_batch_whose_points_failed_to_store_leaves_no_stray_series(
    store: Store, real_batches: list[TableBatch], monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = real_batches[0]
    insert = Store._insert

    def failing(self: Store, name: str, frame: pl.DataFrame) -> None:
        if name == "metric_points":
            raise OSError("disk full")
        insert(self, name, frame)

    monkeypatch.setattr(Store, "_insert", failing)
    with pytest.raises(OSError):
        store.append("metric_samples", batch.frame, batch.series)
    monkeypatch.setattr(Store, "_insert", insert)
    store.append("metric_samples", batch.frame, batch.series)
    stored = _stored(store)
    assert stored.equals(_in_file_order(_flat(batch).drop(HINTS)).select(stored.columns))
    ids = store.reader.sql("SELECT series_id FROM metric_series")["series_id"]
    assert ids.n_unique() == ids.len()


def test_a_line_that_does_not_start_with_its_head_is_kept_whole(store: Store) -> None:
    frame = pl.DataFrame(
        {
            "source_path": "m.prom",
            "source_line": [1, 2, 3],
            "raw": ['a{x="1"} 1', 'a{x="1"} 2', 'a{x="1"} 3'],
            "metric": "kv_cache_usage",
            "value": [1.0, 2.0, 3.0],
            SERIES_HINT: [0, 0, 1],
            # the third row's head differs from its line (as a cut line's would)
            SERIES_HEAD: ['a{x="1"}', 'a{x="1"}', 'a{x="1",y="2"}'],
        }
    )
    store.append("metric_samples", frame)
    got = store.reader.sql("SELECT raw, tail FROM metric_points ORDER BY rowid").rows()
    assert got == [(" 1", True), (" 2", True), ('a{x="1"} 3', False)]
    back = store.reader.sql("SELECT raw FROM metric_samples ORDER BY sample_row")["raw"]
    assert back.to_list() == frame["raw"].to_list()
