"""The config statements a setting's value can come from: the first of each kind, in SQL.

A setting's effective value (effective.py) is the statement of the best-ranked origin, then
the first by (source_path, source_line); a statement with an unstated value ("", "None")
never counts. Every later statement of the same key, origin, engine and replica loses to
the first, whatever its value. A crash loop states its whole configuration again at every
start (22,716 starts in a gigabyte: 380,000 config rows, each carrying its ~4 KB line),
and a day of scrapes restates cache_config_info in every file: read whole into Python
dicts, those rows took gigabytes. So the store keeps every statement, and what the facts
and rules read is the first of each kind, which picks the same value from the same line.
"""

from __future__ import annotations

from collections.abc import Iterable

# effective._UNSTATED, spelled for SQL: a value Python's str() makes one of these is skipped.
_UNSTATED = "('', 'None', 'none', 'null')"
# effective_value's order: str(source_path), then `source_line or 0`; rowid settles ties.
_FIRST = "coalesce(source_path, 'None'), coalesce(source_line, 0), _rid"


def _stated(column: str) -> str:
    """Whether str() of the column's value states something (NULL is "None": unstated)."""
    return f"coalesce(CAST({column} AS VARCHAR), 'None') NOT IN {_UNSTATED}"


def firsts_of(
    table: str,
    firsts: str,
    where: str = "true",
    *,
    order: str = "source_path, source_line",
    row_id: str = "rowid",
    also: str = "",
) -> str:
    """Every column (and `also`) of the rows of `table` meeting `where` for which `firsts`
    (a condition on windows, see `first`) holds, in `order`. The window runs over the key
    columns and the rows are read by id after: over every column DuckDB carried each row's
    text through the sort (0.7 s for 111,316 config rows, 0.05 s so)."""
    return (
        f"SELECT *{also} FROM {table} WHERE {where} AND {row_id} IN (SELECT _rid FROM "
        f"(SELECT *, {row_id} AS _rid FROM {table} WHERE {where}) QUALIFY {firsts}) "
        f"ORDER BY {order}"
    )


def first(partition: str, order: str = _FIRST) -> str:
    """Whether a row is the first of its `partition` in `order` (a column `_rid`, the row's
    id, may settle ties)."""
    return f"row_number() OVER (PARTITION BY {partition} ORDER BY {order}) = 1"


def first_config_rows() -> str:
    """The config table's first statement per replica, key, origin, engine and statedness
    (unstated ones are kept too: the keys a run names include them)."""
    return firsts_of("config", first(f"replica, key, origin, engine, {_stated('value')}"))


def first_gauge_rows(metrics: Iterable[str]) -> str:
    """The first sample of each setting gauge (`metrics`, names of the code's own settings
    table) per replica, with its value as a whole number (`_v`)."""
    names = ", ".join("'" + m.replace("'", "''") + "'" for m in metrics)
    whole = "CAST(CAST(value AS BIGINT) AS VARCHAR)"
    return firsts_of(
        "metric_samples",
        first(f"replica, metric, {whole} IS NULL"),
        f"metric IN ({names}) AND suffix = ''",
        row_id="sample_row",
        also=f", {whole} AS _v",
    )


def first_engine_rows(columns: Iterable[str]) -> str:
    """The log_engine rows that are the first to state at least one of `columns` (stated or
    not) for their replica and engine; a kept row's other columns come along, later than
    their own first statement, so they never win."""
    firsts = [
        f"({c} IS NOT NULL AND {first(f'replica, engine, {c} IS NULL, {_stated(c)}')})"
        for c in columns
    ]
    return firsts_of("log_engine", " OR ".join(firsts))
