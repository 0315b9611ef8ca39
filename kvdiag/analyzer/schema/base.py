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

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def cols(*specs: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in specs)


PROVENANCE = cols(
    ("source_path", "VARCHAR", "file, relative to the incident folder"),
    ("source_line", "BIGINT", "1-based line in that file (NULL for whole-file facts)"),
    ("raw", "VARCHAR", "the line as read (ANSI and control characters removed)"),
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

SCRAPE_ENVELOPE = PROVENANCE + cols(
    ("replica", "VARCHAR", "the `instance` label, else the folder or file the scrape came from"),
    ("ts", "TIMESTAMP", "scrape time (UTC) from the file name, a marker line or the sample"),
)
