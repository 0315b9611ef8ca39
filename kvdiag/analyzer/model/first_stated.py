"""The config statements a setting's value can come from: the first of each kind, in SQL.

A setting's effective value (effective.py) is the statement of the best-ranked origin, then
the first by (source_path, source_line); a statement with an unstated value ("", "None")
never counts. Every later statement of the same key, origin, engine and replica loses to
the first, whatever its value. A crash loop states its whole configuration again at every
start (26,190 starts in a gigabyte: 445,000 config rows, each carrying its ~4 KB line),
and a day of scrapes restates cache_config_info in every file: read whole into Python
dicts, those rows took gigabytes. So what the facts and rules read is the first of each
kind, which picks the same value from the same line.
"""

from __future__ import annotations

from collections.abc import Iterable

# effective._UNSTATED, spelled for SQL: a value Python's str() makes one of these is skipped.
_UNSTATED = "('', 'None', 'none', 'null')"
# effective_value's order: str(source_path), then `source_line or 0`.
_FIRST = "coalesce(source_path, 'None'), coalesce(source_line, 0)"


def _stated(column: str) -> str:
    """Whether str() of the column's value states something (NULL is "None": unstated)."""
    return f"coalesce(CAST({column} AS VARCHAR), 'None') NOT IN {_UNSTATED}"


def first_ids(
    table: str, partition: str, where: str = "true", order: str = _FIRST, row_id: str = "rowid"
) -> str:
    """The id of the first row of each `partition` of `table`'s rows meeting `where`, by
    `order` (expressions that are never NULL; the id settles ties). An aggregate, not a
    window: 9 windows over a 0.25 GB crash loop's log_engine rows took 0.22 s, 0.018 so."""
    return (
        f"SELECT arg_min({row_id}, ({order}, {row_id})) AS _rid FROM {table} "
        f"WHERE {where} GROUP BY {partition}"
    )


def firsts_of(
    table: str,
    ids: Iterable[str],
    where: str = "true",
    *,
    order: str = "source_path, source_line",
    row_id: str = "rowid",
    also: str = "",
) -> str:
    """Every column (and `also`) of the rows of `table` meeting `where` whose id one of the
    `ids` queries (`first_ids`) gives, in `order`. The firsts are found over the key columns
    and the rows read whole by id after: a sort over every column carried each row's text
    (0.7 s for 111,316 config rows, 0.05 s so)."""
    return (
        f"SELECT *{also} FROM {table} WHERE {where} AND {row_id} IN "
        f"({' UNION ALL '.join(ids)}) ORDER BY {order}"
    )


def first_config_rows() -> str:
    """The config table's first statement per replica, key, origin, engine and statedness
    (unstated ones are kept too: the keys a run names include them)."""
    return firsts_of(
        "config", [first_ids("config", f"replica, key, origin, engine, {_stated('value')}")]
    )


def first_gauge_rows(metrics: Iterable[str]) -> str:
    """The first sample of each setting gauge (`metrics`, names of the code's own settings
    table) per replica, with its value as a whole number (`_v`)."""
    names = ", ".join("'" + m.replace("'", "''") + "'" for m in metrics)
    where = f"metric IN ({names}) AND suffix = ''"
    whole = "CAST(CAST(value AS BIGINT) AS VARCHAR)"
    ids = first_ids(
        "metric_samples", f"replica, metric, {whole} IS NULL", where, row_id="sample_row"
    )
    return firsts_of("metric_samples", [ids], where, row_id="sample_row", also=f", {whole} AS _v")


def first_engine_rows(columns: Iterable[str]) -> str:
    """The log_engine rows that are the first to state each of `columns` (stated or not) for
    their replica and engine; a kept row's other columns come along, later than their own
    first statement, so they never win."""
    return firsts_of(
        "log_engine",
        [
            first_ids("log_engine", f"replica, engine, {_stated(c)}", f"{c} IS NOT NULL")
            for c in columns
        ],
    )
