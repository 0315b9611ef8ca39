"""Do the inputs tell one story in time? Checked once, after ingestion, on the cleaned store.

Each check reads the store and returns input problems (file and line) and doubts, which
lower the verdict's confidence where it stands on the inputs concerned (classify.py):

- a log whose clock jumps backwards, or leaps ahead by days: a reset clock or two runs;
- load sources (server logs, scrape series, client request logs) whose time spans do not
  overlap: evidence from different incidents side by side;
- two engine versions in one replica: two servers or two runs in one folder;
- scrapes out of order, two scrapes at the same moment, and counters that reset (the
  server restarted: increases are counted from zero after it, as Prometheus does).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import polars as pl

from kvdiag.analyzer.schema.logs import LOG_TABLES
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain.records.diagnosis import Doubt, InputProblem

# Processes of one server write to one stream with second-resolution stamps, so lines of
# the API server and the engine core interleave a second or two out of order.
BACKWARD_TOLERANCE = timedelta(seconds=5)
# vLLM prints nothing while idle, so hours of silence are normal; weeks are not one run.
FORWARD_LEAP = timedelta(days=7)
# Two load sources further apart than this describe different moments.
OVERLAP_TOLERANCE = timedelta(hours=1)
# Problems listed per check before the rest are summed up.
MAX_LISTED = 5

Found = tuple[list[InputProblem], list[Doubt]]


def _n(count: int, word: str) -> str:
    """'1 more jump', '3 more jumps'."""
    return f"{count:,} more {word}{'' if count == 1 else 's'}"


def _t(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S")


def _span(delta: timedelta) -> str:
    seconds = abs(delta.total_seconds())
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds:.0f} s"


def _log_times() -> str:
    return " UNION ALL ".join(
        f'SELECT source_path, source_line, replica, ts FROM "{t.name}" WHERE ts IS NOT NULL'
        for t in LOG_TABLES
        # log_http_counts folds many access lines into one row: no single time to check
        if any(c.name == "ts" for c in t.columns)
    )


def clock_jumps(reader: StoreReader) -> Found:
    """Lines of one log whose time goes back, or leaps ahead by a week or more."""
    rows = reader.sql(
        f"WITH t AS ({_log_times()}), d AS (SELECT source_path, source_line, ts, "
        "lag(ts) OVER (PARTITION BY source_path ORDER BY source_line, ts) AS prev, "
        "lag(source_line) OVER (PARTITION BY source_path ORDER BY source_line, ts) AS prev_line "
        "FROM t) SELECT * FROM d WHERE prev - ts > ? OR ts - prev >= ? "
        "ORDER BY source_path, source_line",
        [BACKWARD_TOLERANCE, FORWARD_LEAP],
    )
    problems = []
    for (path,), group in rows.group_by("source_path", maintain_order=True):
        first = group.row(0, named=True)
        back = first["ts"] < first["prev"]
        what = "goes back" if back else "leaps ahead"
        more = f"; {_n(group.height - 1, 'jump')} in this file" if group.height > 1 else ""
        problems.append(
            InputProblem(
                str(path),
                first["source_line"],
                f"the clock {what} {_span(first['ts'] - first['prev'])} "
                f"({_t(first['prev'])} at line {first['prev_line']}, {_t(first['ts'])} here): "
                f"a reset clock, or two runs in one file{more}",
            )
        )
    paths = frozenset(str(p) for p in rows["source_path"].unique().to_list())
    doubts = [Doubt("a log's clock jumps", paths)] if paths else []
    return problems, doubts


def _sources(reader: StoreReader) -> pl.DataFrame:
    """Time span of each load source: a log file, a scrape folder, a client request log."""
    return reader.sql(
        f"WITH s AS (SELECT source_path AS source, ts FROM ({_log_times()}) "
        "UNION ALL SELECT CASE WHEN contains(source_path, '/') THEN "
        "regexp_replace(source_path, '/[^/]*$', '/') ELSE source_path END, ts "
        "FROM metric_samples WHERE ts IS NOT NULL "
        "UNION ALL SELECT source_path, coalesce(send_ts, end_ts) FROM client_requests) "
        "SELECT source, min(ts) AS start, max(ts) AS stop FROM s WHERE ts IS NOT NULL "
        "GROUP BY source ORDER BY start, source"
    )


def _clusters(sources: pl.DataFrame) -> list[list[dict[str, Any]]]:
    """Sources grouped into spans that overlap (within the tolerance), in time order."""
    clusters: list[list[dict[str, Any]]] = []
    end: datetime | None = None
    for row in sources.iter_rows(named=True):
        if end is None or row["start"] - end > OVERLAP_TOLERANCE:
            clusters.append([])
            end = row["stop"]
        clusters[-1].append(row)
        end = max(end, row["stop"])
    return clusters


def _describe(cluster: list[dict[str, Any]]) -> str:
    names = ", ".join(r["source"] for r in cluster[:MAX_LISTED])
    if len(cluster) > MAX_LISTED:
        names += f" and {len(cluster) - MAX_LISTED} more"
    start = min(r["start"] for r in cluster)
    stop = max(r["stop"] for r in cluster)
    return f"{names} ({_t(start)} to {_t(stop)})"


def disjoint_sources(reader: StoreReader) -> Found:
    """Load sources that fall into separate time spans: not one incident."""
    clusters = _clusters(_sources(reader))
    if len(clusters) < 2:
        return [], []
    problems = []
    for before, after in pairwise(clusters):
        gap = min(r["start"] for r in after) - max(r["stop"] for r in before)
        problems.append(
            InputProblem(
                after[0]["source"],
                None,
                f"{_describe(after)} does not overlap in time with {_describe(before)}: "
                f"{_span(gap)} apart; they may come from different incidents, and findings "
                "that combine them are doubtful",
            )
        )
    return problems, [Doubt("the inputs come from time spans that do not overlap")]


def engine_versions(reader: StoreReader) -> Found:
    """Replicas whose logs state two engine versions: two servers or two runs."""
    rows = reader.sql(
        "SELECT replica, version, source_path, source_line FROM log_engine "
        "WHERE version IS NOT NULL ORDER BY replica, source_path, source_line"
    )
    problems, doubts = [], []
    for (replica,), group in rows.group_by("replica", maintain_order=True):
        firsts = group.unique("version", keep="first", maintain_order=True)
        if firsts.height < 2:
            continue
        stated = ", ".join(
            f"{r['version']} ({r['source_path']}:{r['source_line']})"
            for r in firsts.iter_rows(named=True)
        )
        second = firsts.row(1, named=True)
        problems.append(
            InputProblem(
                second["source_path"],
                second["source_line"],
                f"replica {replica}: the logs state {firsts.height} engine versions "
                f"({stated}): two servers or two runs in one folder; give each its own "
                "folder, or leave one out",
            )
        )
        paths = frozenset(str(p) for p in group["source_path"].unique().to_list())
        doubts.append(Doubt(f"replica {replica} mixes engine versions", paths))
    return problems, doubts


# Each counter sample with the one before it in its series (replica, name, labels), kept
# where the value fell. The series are numbered from metric_series first, so the window over
# every point sorts an integer, not each point's strings (a day of 1-s scrapes is tens of
# millions of points).
_COUNTER_DROPS = """
WITH k AS (SELECT series_id, dense_rank() OVER (ORDER BY replica, name, series) AS g
           FROM metric_series WHERE suffix = 'total'),
x AS (SELECT p.series_id, p.source_path, p.source_line, p.ts, p.value,
             lag(p.value) OVER w AS prev, lag(p.ts) OVER w AS prev_ts
      FROM metric_points p JOIN k USING (series_id) WHERE p.ts IS NOT NULL
      WINDOW w AS (PARTITION BY k.g ORDER BY p.ts, p.source_path, p.source_line))
SELECT s.replica, s.metric, x.source_path, x.source_line, x.ts, x.value, x.prev, x.prev_ts
FROM x JOIN metric_series s USING (series_id) WHERE x.value < x.prev
ORDER BY s.replica, x.ts, x.source_path, x.source_line
"""


def counter_resets(reader: StoreReader) -> Found:
    """Counters that drop between scrapes: a problem per restart (replica and scrape), the
    first MAX_LISTED of each replica, the last of them counting the rest."""
    rows = reader.sql(_COUNTER_DROPS)
    # A fleet replayed for a day restarts thousands of times: one query, then a few rows.
    restarts = (
        rows.group_by("replica", "ts", maintain_order=True)
        .agg(pl.all().first(), pl.len().alias("counters"))
        .with_columns(
            pl.int_range(pl.len()).over("replica").alias("nth"),
            pl.len().over("replica").alias("restarts"),
        )
        .filter(pl.col("nth") < MAX_LISTED)
    )
    problems = []
    for r in restarts.iter_rows(named=True):
        more = f", and {_n(r['counters'] - 1, 'counter')}" if r["counters"] > 1 else ""
        rest = r["restarts"] - MAX_LISTED
        last = r["nth"] == MAX_LISTED - 1
        also = f"; {_n(rest, 'restart')} of this replica" if last and rest > 0 else ""
        problems.append(
            InputProblem(
                r["source_path"],
                r["source_line"],
                f"counters drop ({r['metric']} {r['prev']:g} -> {r['value']:g}{more}) between "
                f"{_t(r['prev_ts'])} and {_t(r['ts'])}: replica {r['replica']} restarted, or "
                f"the scrapes are misdated; increases after it are counted from zero{also}",
            )
        )
    return problems, []


def _folder(column: str) -> str:
    return f"regexp_replace({column}, '/?[^/]*$', '')"


def scrapes_out_of_order(reader: StoreReader) -> Found:
    """Scrapes whose time goes back in file order (names or markers out of order)."""
    rows = reader.sql(
        "SELECT * FROM (SELECT replica, source_path, source_line, ts, lag(ts) OVER w AS prev, "
        "lag(source_path) OVER w AS prev_path, lag(source_line) OVER w AS prev_line "
        "FROM scrapes WHERE origin = 'body' AND ts IS NOT NULL WINDOW w AS (PARTITION BY "
        f"replica, {_folder('source_path')} ORDER BY source_path, source_line)) "
        "WHERE ts < prev ORDER BY source_path, source_line"
    )
    problems = [
        InputProblem(
            r["source_path"],
            r["source_line"],
            f"scrapes out of order: this one ({_t(r['ts'])}) comes after "
            f"{r['prev_path']}:{r['prev_line']} ({_t(r['prev'])}); kvdiag orders scrapes by "
            "time, not by file name or position",
        )
        for r in rows.head(MAX_LISTED).iter_rows(named=True)
    ]
    if rows.height > MAX_LISTED:
        problems[-1] = InputProblem(
            problems[-1].path,
            problems[-1].line,
            f"{problems[-1].message}; {_n(rows.height - MAX_LISTED, 'scrape')} out of order",
        )
    return problems, []


def duplicate_scrapes(reader: StoreReader) -> Found:
    """Two scrapes of one replica at the same moment, and whether their values disagree."""
    dups = reader.sql(
        "SELECT replica, ts, list(source_path || ':' || source_line ORDER BY source_path, "
        "source_line) AS refs, list(source_path ORDER BY source_path, source_line) AS paths "
        "FROM scrapes WHERE origin = 'body' AND ts IS NOT NULL GROUP BY replica, ts "
        "HAVING count(*) > 1 ORDER BY replica, ts"
    )
    if dups.is_empty():
        return [], []
    # Only the moments scraped twice: grouping every sample would cost a pass over all of
    # them.
    conflicts = reader.sql(
        "WITH d AS (SELECT replica, ts FROM scrapes WHERE origin = 'body' "
        "AND ts IS NOT NULL GROUP BY replica, ts HAVING count(*) > 1) "
        "SELECT replica, ts, any_value(metric) AS metric, min(value) AS low, max(value) AS high "
        "FROM metric_samples SEMI JOIN d USING (replica, ts) "
        "GROUP BY replica, ts, name, series, le "
        "HAVING count(DISTINCT value) > 1 ORDER BY replica, ts, metric"
    )
    problems, doubts = [], []
    for d in dups.head(MAX_LISTED).iter_rows(named=True):
        clash = conflicts.filter((pl.col("replica") == d["replica"]) & (pl.col("ts") == d["ts"]))
        if clash.height:
            c = clash.row(0, named=True)
            more = f", and {clash.height - 1:,} more series" if clash.height > 1 else ""
            verdict = f"disagree ({c['metric']} {c['low']:g} vs {c['high']:g}{more})"
            doubts.append(Doubt("two scrapes at one moment disagree", frozenset(d["paths"])))
        else:
            verdict = "hold the same values: one scrape saved twice"
        path, _, line = d["refs"][1].rpartition(":")
        problems.append(
            InputProblem(
                path,
                int(line),
                f"{len(d['refs'])} scrapes of replica {d['replica']} at {_t(d['ts'])} "
                f"({', '.join(d['refs'])}) {verdict}",
            )
        )
    return problems, doubts


_LOGGED = tuple(t.name for t in LOG_TABLES)
# Each check with the tables it reads: a check whose tables are all empty finds nothing,
# and is not asked (its queries cost milliseconds each even on empty tables).
CHECKS: tuple[tuple[Callable[[StoreReader], Found], tuple[str, ...]], ...] = (
    (clock_jumps, _LOGGED),
    (disjoint_sources, (*_LOGGED, "metric_samples", "client_requests")),
    (engine_versions, ("log_engine",)),
    (counter_resets, ("metric_points",)),
    (scrapes_out_of_order, ("scrapes",)),
    (duplicate_scrapes, ("scrapes",)),
)


def time_problems(reader: StoreReader) -> tuple[tuple[InputProblem, ...], tuple[Doubt, ...]]:
    """Every time-consistency problem, and the doubts they raise."""
    problems: list[InputProblem] = []
    doubts: list[Doubt] = []
    for check, tables in CHECKS:
        if not any(reader.has_rows(t) for t in tables):
            continue
        found, doubted = check(reader)
        problems += found
        doubts += doubted
    return tuple(problems), tuple(doubts)
