"""Table declarations: columns with types and meaning, and the shared provenance columns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # DuckDB type
    doc: str


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    # A table kept as a view over others (its SELECT): it is appended to, read and set
    # aside by name like the rest; the store writes its parts (see store/series_tables.py).
    view: str | None = None
    # Set on the tables that store a view's rows: what they are part of. They are not
    # appended to, validated or counted on their own.
    part_of: str | None = None

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def row_id(self) -> str:
        """The column naming one row for a later DELETE or read-back: DuckDB's rowid, or a
        view's `sample_row` (the rowid of the row in its base table)."""
        return "sample_row" if self.view is not None else "rowid"


def cols(*specs: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in specs)


PROVENANCE = cols(
    ("source_path", "VARCHAR", "file, relative to the incident folder"),
    ("source_line", "BIGINT", "1-based line in that file (NULL for whole-file facts)"),
    (
        "raw",
        "VARCHAR",
        "the line as read (ANSI and control characters removed); NULL in a temporary "
        "database for a line read by reference (line_blocks)",
    ),
)

# Every log-derived table starts with these: who said it, and when.
LOG_ENVELOPE = PROVENANCE + cols(
    ("replica", "VARCHAR", "replica: pod/host name if printed, else the file's folder or name"),
    ("ts", "TIMESTAMP", "time of the line (UTC assumed); NULL when the line has none"),
    ("ts_raw", "VARCHAR", "the time exactly as printed, e.g. '11-29 13:34:39'"),
    ("process", "VARCHAR", "process name from the (Name pid=N) prefix: EngineCore, Worker_TP3 ..."),
    ("pid", "BIGINT", "process id from the prefix"),
    ("rank", "INTEGER", "tensor-parallel rank when the process name or [rankN] gives it"),
    ("level", "VARCHAR", "log level"),
)
