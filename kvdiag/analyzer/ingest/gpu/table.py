"""nvidia-smi's default table, read by cells, so every layout width parses alike.

Layouts seen (../shared/docs/vllm-formats.md §5.2): width 79 (drivers up to ~525), 87 (535),
91 (545 and later, including 580 and 610, whose header says `KMD Version` / `CUDA UMD
Version`). Cells are split on `|`; a GPU is a pair of rows (index, name, persistence, bus
id; then fan, temperature, power, `used MiB / total MiB`, utilization), followed on newer
drivers by a MIG-mode row. The processes section lists one process per row; names and
values too wide for their column are truncated with `...` and kept as printed (a truncated
memory value is not a number: it is stored as NULL and counted in a note).
MIG device sections are not read: their rows count as unmatched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvdiag.analyzer.ingest.gpu.snapshots import SnapshotBook, number

KIND = "nvsmi_table"

# Borders and rules: +----+, |====+====|, and the 535 layout's |----+----+ (ends in +).
_BORDER = re.compile(r"^[+|][-=+|]*[-=][-=+|]*[+|]$")
_HEADER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s+(?P<driver>\S+)"
    r"(?:\s+CUDA(?: UMD)? Version:\s+(?P<cuda>\S+))?"
)
_COLUMN_TITLES = re.compile(
    r"Persistence-M|TCC/WDDM|Pwr:Usage/Cap|Memory-Usage|MIG M\.|Bus-Id|GPU-Util|Processes:"
    r"|Process name|GPU Memory|^\|\s+ID\s+ID\s+Usage\s*\|$"
)
_GPU_ROW = re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<mode>On|Off|WDDM|TCC)\s*$")
_BUS = re.compile(r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b")
_MEMORY = re.compile(r"^\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*$")
_UTIL = re.compile(r"^\s*(?P<util>\d+%|N/A)\s")
_PROCESS = re.compile(
    r"^\s*(?P<gpu>\d+|N/A)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+"
    r"(?P<type>C\+G|G\+C|M\+C|C|G|M)\s+(?P<name>.+?)\s+(?P<mem>\d+MiB|N/A|\d*\.\.\.)\s*$"
)
_NO_PROCESSES = re.compile(r"^\s*No running processes found\s*$")


@dataclass
class TableReader:
    """Feeds on the lines of one file; returns True for every line it understood."""

    book: SnapshotBook
    driver: str | None = None
    pending_gpu: dict[str, Any] | None = None
    truncated_memory: list[int] = field(default_factory=list)

    def feed(self, line_no: int, line: str) -> bool:
        if _BORDER.match(line):
            return True
        if not (line.startswith("|") and line.endswith("|") and len(line) > 1):
            return False
        cells = line[1:-1].split("|")
        header = _HEADER.search(line)
        if header:
            self.driver = header["driver"]
            self.book.start(KIND, self.driver)
            return True
        if _COLUMN_TITLES.search(line):
            return True
        if len(cells) == 1:
            return self._process(line_no, line, cells[0])
        if len(cells) == 3:
            return self._gpu_row(line_no, line, cells)
        return False

    def _gpu_row(self, line_no: int, line: str, cells: list[str]) -> bool:
        first = _GPU_ROW.match(cells[0])
        if first:
            bus = _BUS.match(cells[1])
            self.pending_gpu = {
                "gpu": int(first["index"]),
                "name": first["name"],
                "bus_id": bus["bus"] if bus else None,
            }
            return True
        memory = _MEMORY.match(cells[1])
        if memory:
            self._memory_row(line_no, line, memory, cells[2])
            return True
        # MIG-mode row (newer drivers) and blank spacer rows: no value kvdiag uses.
        return not cells[0].strip() and not cells[1].strip()

    def _memory_row(self, line_no: int, line: str, memory: re.Match[str], util_cell: str) -> None:
        gpu = self.pending_gpu or {"gpu": None, "name": None, "bus_id": None}
        self.pending_gpu = None
        snap = self.book.current(KIND)
        if snap.has_gpu(gpu["gpu"]):  # the same GPU again without a header: a new snapshot
            snap = self.book.start(KIND, self.driver)
        if snap.driver is None:
            snap.driver = self.driver
        util = _UTIL.match(util_cell + " ")
        self.book.add_gpu(
            snap,
            line_no,
            line,
            _key=gpu["gpu"],
            **gpu,
            memory_used_mib=float(memory["used"]),
            memory_total_mib=float(memory["total"]),
            utilization_pct=number(util["util"]) if util else None,
        )

    def _process(self, line_no: int, line: str, cell: str) -> bool:
        if _NO_PROCESSES.match(cell):
            return True
        m = _PROCESS.match(cell)
        if not m:
            return False
        used: float | None = None
        if m["mem"].endswith("MiB"):
            used = float(m["mem"][:-3])
        elif m["mem"].endswith("..."):
            self.truncated_memory.append(line_no)
        snap = self.book.current(KIND)
        self.book.add_proc(
            snap,
            line_no,
            line,
            gpu=int(m["gpu"]) if m["gpu"].isdigit() else None,
            pid=int(m["pid"]),
            process_name=m["name"],
            process_type=m["type"],
            used_mib=used,
        )
        return True

    def notes(self) -> list[str]:
        if not self.truncated_memory:
            return []
        lines = ", ".join(str(n) for n in self.truncated_memory[:5])
        return [f"process memory truncated by nvidia-smi ('...') on line(s) {lines}: stored NULL"]
