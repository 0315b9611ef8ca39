"""The store's tables, declared as data: name, purpose, columns with types and meaning.

`store/database.py` turns these into DDL; `kvdiag tables` and docs/database.md describe
them for people who keep the database with `--db` and query it with SQL. Every table
that holds what an input said carries provenance: `source_path` (relative to the incident
folder), `source_line` (1-based) and `raw` (the line as read, control characters removed).

Tables are grouped by domain, one module each, so ingesters of different inputs extend
different files. Columns are only ever added, never renamed: rules and saved databases
depend on them.
"""

from __future__ import annotations

from kvdiag.analyzer.schema.base import Column, Table
from kvdiag.analyzer.schema.core import CORE_TABLES
from kvdiag.analyzer.schema.gpu import GPU_TABLES
from kvdiag.analyzer.schema.logs import LOG_TABLES
from kvdiag.analyzer.schema.metrics import METRIC_TABLES
from kvdiag.analyzer.schema.model import MODEL_TABLES

TABLES: tuple[Table, ...] = CORE_TABLES + LOG_TABLES + METRIC_TABLES + GPU_TABLES + MODEL_TABLES
TABLES_BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}
assert len(TABLES_BY_NAME) == len(TABLES), "duplicate table name"


def table(name: str) -> Table:
    """The declared table, or KeyError naming the known ones."""
    try:
        return TABLES_BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known: {sorted(TABLES_BY_NAME)}") from None


__all__ = ["TABLES", "TABLES_BY_NAME", "Column", "Table", "table"]
