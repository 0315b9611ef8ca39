"""nvidia-smi `--query-gpu=... --format=csv` and `--query-compute-apps=...` output.

The header names the columns (`memory.used [MiB]`; the apps query prints `used_gpu_memory`
for the field it was asked as `used_memory`). Values keep units unless `nounits` was given;
`[N/A]` and `[Not Supported]` mean no value. Without a header (`noheader`) the column order
comes, in this order of preference, from:

1. a header printed earlier in the same file (a loop that appends rows under one header);
2. the `--query-gpu=` / `--query-compute-apps=` field list of an `nvidia-smi` command line
   saved in the file (`$ nvidia-smi --query-gpu=index,name,... --format=csv,noheader`);
3. the documented example order `index, name, memory.total, memory.used, memory.free[,
   utilization.gpu]` (vllm-formats.md §5.2), accepted only for rows whose every field has
   that shape: an integer, a name, three MiB numbers with total >= used + free, and an
   optional percentage. Anything else is not guessed at: the row counts as unmatched.

Without an `index` column the GPU index is the row's position in its snapshot (nvidia-smi
lists GPUs in index order). A compute-apps row names its GPU only by UUID or bus id when
those were queried; with a single GPU in the snapshot it is that GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kvdiag.analyzer.ingest.gpu.snapshots import Snapshot, SnapshotBook, na, number

KIND = "nvsmi_csv"
ASSUMED_ORDER = ("index", "name", "memory.total", "memory.used", "memory.free", "utilization.gpu")

# query field -> column of gpu_snapshots / gpu_processes (aliases as --help-query-gpu lists them)
_GPU_FIELDS = {
    "index": "gpu",
    "name": "name",
    "gpu_name": "name",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "pci.bus_id": "bus_id",
    "gpu_bus_id": "bus_id",
    "memory.total": "memory_total_mib",
    "memory.used": "memory_used_mib",
    "memory.free": "memory_free_mib",
    "memory.reserved": "memory_reserved_mib",
    "utilization.gpu": "utilization_pct",
    "driver_version": "driver_version",
    "timestamp": "ts",
}
_APP_FIELDS = {
    "pid": "pid",
    "process_name": "process_name",
    "name": "process_name",
    "used_memory": "used_mib",
    "used_gpu_memory": "used_mib",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "bus_id",
    "timestamp": "ts",
}
_APP_MARKERS = {"pid", "process_name", "used_memory", "used_gpu_memory"}
_NUMERIC = {"gpu", "memory_total_mib", "memory_used_mib", "memory_free_mib"}
_NUMERIC |= {"memory_reserved_mib", "utilization_pct", "pid", "used_mib"}
_TOKEN = re.compile(r"^(?P<field>[a-z][a-z0-9_.]*)(?: \[(?P<unit>[^\]]+)\])?$")
_QUERY = re.compile(r"--query-(?P<what>gpu|compute-apps)[= ](?P<fields>[\w.,]+)")
_CSV_TIME = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?$")


def header_fields(line: str) -> list[str] | None:
    """Field names of a CSV header line, or None when the line is not one."""
    tokens = [t.strip() for t in line.split(",")]
    fields = []
    for tok in tokens:
        m = _TOKEN.match(tok)
        if not m:
            return None
        fields.append(m["field"])
    known = set(_GPU_FIELDS) | set(_APP_FIELDS)
    if not any(f in known and f not in ("name", "timestamp") for f in fields):
        return None
    return fields


def query_fields(command: str) -> tuple[str, list[str]] | None:
    """("gpu" | "apps", fields) from an nvidia-smi command line with --query-...=."""
    m = _QUERY.search(command)
    if not m:
        return None
    return ("apps" if m["what"] == "compute-apps" else "gpu"), m["fields"].split(",")


def _csv_time(value: str) -> datetime | None:
    text = value.strip()
    return datetime.strptime(text[:19], "%Y/%m/%d %H:%M:%S") if _CSV_TIME.match(text) else None


def _split(line: str, width: int, text_col: int | None) -> list[str] | None:
    parts = [p.strip() for p in line.split(", ")]
    if len(parts) != width:
        parts = [p.strip() for p in line.split(",")]
    if len(parts) > width and text_col is not None:  # a comma inside a process name
        extra = len(parts) - width
        merged = ", ".join(parts[text_col : text_col + extra + 1])
        parts = [*parts[:text_col], merged, *parts[text_col + extra + 1 :]]
    return parts if len(parts) == width else None


def _typed(columns: list[str | None], parts: list[str]) -> dict[str, Any] | None:
    """Column values of one row, or None when a number column holds text (not a data row)."""
    row: dict[str, Any] = {}
    for col, value in zip(columns, parts, strict=True):
        if col is None:
            continue
        try:
            if col in _NUMERIC:
                row[col] = number(value)
            elif col == "ts":
                row[col] = _csv_time(value)
            else:
                row[col] = None if na(value) else value
        except ValueError:
            return None
    return row


def _assumed_shape(parts: list[str]) -> bool:
    if len(parts) not in (5, 6) or not parts[0].isdigit() or re.match(r"^[\d.]+", parts[1]):
        return False
    try:
        total, used, free = (number(p) for p in parts[2:5])
        util = number(parts[5]) if len(parts) == 6 else 0.0
    except ValueError:
        return False
    if total is None or used is None or free is None:
        return False
    return used + free <= total * 1.001 and 0 <= (util or 0) <= 100


@dataclass
class CsvReader:
    """Feeds on the lines of one file; returns True for every line it understood."""

    book: SnapshotBook
    kind: str | None = None  # "gpu" | "apps" while a header or command is in force
    columns: list[str | None] = field(default_factory=list)
    from_command: bool = False
    assumed: bool = False
    notes: set[str] = field(default_factory=set)
    app_headers: int = 0
    app_rows: int = 0

    def command(self, text: str) -> None:
        """An nvidia-smi command line: its field list orders a header-less block."""
        found = query_fields(text)
        if found:
            self._use(found[0], found[1], from_command=True)

    def feed(self, line_no: int, line: str) -> bool:
        fields = header_fields(line)
        if fields is not None:
            kind = "apps" if _APP_MARKERS & set(fields) else "gpu"
            self._use(kind, fields, from_command=False)
            if kind == "gpu":
                self.book.start(KIND)
            else:
                self.app_headers += 1
            return True
        if self.kind is None or self.assumed:
            return self._assumed_row(line_no, line)
        return self._row(line_no, line)

    def _use(self, kind: str, fields: list[str], *, from_command: bool) -> None:
        names = _APP_FIELDS if kind == "apps" else _GPU_FIELDS
        self.kind, self.from_command, self.assumed = kind, from_command, False
        self.columns = [names.get(f) for f in fields]

    def _row(self, line_no: int, line: str) -> bool:
        text_col = next(
            (i for i, c in enumerate(self.columns) if c in ("process_name", "name")), None
        )
        parts = _split(line, len(self.columns), text_col)
        row = _typed(self.columns, parts) if parts is not None else None
        if row is None:
            return False
        if self.from_command:
            self.notes.add("header-less CSV: column order from the nvidia-smi command line")
        if self.kind == "apps":
            self._add_process(line_no, line, row)
        else:
            self._add_gpu(line_no, line, row)
        return True

    def _assumed_row(self, line_no: int, line: str) -> bool:
        parts = _split(line, 6, None) or _split(line, 5, None)
        if parts is None or not _assumed_shape(parts):
            return False
        if not self.assumed:
            self.kind, self.assumed = "gpu", True
            self.columns = [_GPU_FIELDS[f] for f in ASSUMED_ORDER[: len(parts)]]
            self.book.start(KIND)
            self.notes.add(
                "header-less CSV read in the documented order " + ", ".join(ASSUMED_ORDER)
            )
        row = _typed(self.columns[: len(parts)], parts)
        if row is None:
            return False
        self._add_gpu(line_no, line, row)
        return True

    def _add_gpu(self, line_no: int, line: str, row: dict[str, Any]) -> None:
        key = row.get("gpu") if row.get("gpu") is not None else row.get("uuid") or row.get("bus_id")
        snap = self.book.current(KIND)
        if snap.has_gpu(key):  # the loop came round again: a new snapshot
            snap = self.book.start(KIND)
        if row.get("gpu") is None:
            row["gpu"] = len(snap.gpus)
            self.notes.add("no index column: GPU index taken from row order")
        row["gpu"] = int(row["gpu"])
        self.book.add_gpu(snap, line_no, line, _key=key if key is not None else row["gpu"], **row)

    def _add_process(self, line_no: int, line: str, row: dict[str, Any]) -> None:
        snap = self.book.current(KIND) if not self.book.snapshots else self.book.snapshots[-1]
        if self.book.pending_ts is not None:
            snap = self.book.start(KIND)
        self.app_rows += 1
        row["gpu"] = _gpu_of_process(snap, row)
        if row.get("pid") is not None:
            row["pid"] = int(row["pid"])
        self.book.add_proc(snap, line_no, line, **row)

    def all_notes(self) -> list[str]:
        extra = []
        if self.app_headers and not self.app_rows:
            extra.append("the compute-apps query listed no process")
        return sorted(self.notes) + extra


def _gpu_of_process(snap: Snapshot, row: dict[str, Any]) -> int | None:
    for key in ("uuid", "bus_id"):
        if row.get(key):
            match = [g["gpu"] for g in snap.gpus if g.get(key) == row[key]]
            if match:
                return int(match[0])
    if len(snap.gpus) == 1 and not row.get("uuid") and not row.get("bus_id"):
        return int(snap.gpus[0]["gpu"])
    return None
