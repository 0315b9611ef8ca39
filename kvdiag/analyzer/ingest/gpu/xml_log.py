"""`nvidia-smi -q -x` XML: one `<nvidia_smi_log>` document per snapshot.

Memory comes from `<fb_memory_usage>` (framebuffer), never from `<bar1_memory_usage>`,
whose children have the same names. GPUs are numbered in document order, which is
nvidia-smi's index order. Several documents in one file (`nvidia-smi -q -x -l N`) are split
at their `<?xml` declarations. Each element keeps the line it started on, so rows cite it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from xml.parsers import expat

from kvdiag.analyzer.ingest.gpu.snapshots import SnapshotBook, ctime, number

KIND = "nvsmi_xml"
_DECL = re.compile(r"^\s*<\?xml\b")


@dataclass
class Node:
    tag: str
    line: int  # 1-based, in the file
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chunks).strip()

    def child(self, *path: str) -> Node | None:
        node: Node | None = self
        for tag in path:
            node = next((c for c in node.children if c.tag == tag), None) if node else None
        return node

    def value(self, *path: str) -> str | None:
        node = self.child(*path)
        return node.text if node is not None else None


def parse(text: str, first_line: int) -> Node:
    """The document's root element; raises expat.ExpatError with the file's line number."""
    parser = expat.ParserCreate()
    stack: list[Node] = []
    root: list[Node] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        node = Node(tag, parser.CurrentLineNumber + first_line - 1, attrs)
        (stack[-1].children if stack else root).append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    def chars(data: str) -> None:
        if stack:
            stack[-1].chunks.append(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    try:
        # Expat ends a line at a bare \r too; lines end only at \n here (as grep counts).
        parser.Parse(text.replace("\r", " "), True)
    except expat.ExpatError as exc:
        exc.lineno = (exc.lineno or 1) + first_line - 1
        raise
    return root[0]


def documents(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line indexes of each XML document in the file."""
    starts = [i for i, t in enumerate(lines) if _DECL.match(t)] or [0]
    if starts[0] != 0 and any(t.strip() for t in lines[: starts[0]]):
        starts.insert(0, 0)
    return [(s, e) for s, e in zip(starts, [*starts[1:], len(lines)], strict=True)]


def _mib(value: str | None) -> float | None:
    return number(value.replace("MiB", "").strip()) if value else None


def read_document(root: Node, lines: list[str], book: SnapshotBook) -> None:
    """GPU and process rows of one parsed document."""
    stamp = ctime(root.value("timestamp") or "")
    if stamp:
        book.announce(stamp[0], "XML timestamp as printed (machine local time)")
    snap = book.start(KIND, root.value("driver_version"))
    for index, gpu in enumerate(c for c in root.children if c.tag == "gpu"):
        fb = gpu.child("fb_memory_usage")
        book.add_gpu(
            snap,
            gpu.line,
            lines[gpu.line - 1],
            _key=index,
            gpu=index,
            uuid=gpu.value("uuid"),
            name=gpu.value("product_name"),
            bus_id=gpu.attrs.get("id"),
            memory_total_mib=_mib(fb.value("total")) if fb else None,
            memory_used_mib=_mib(fb.value("used")) if fb else None,
            memory_free_mib=_mib(fb.value("free")) if fb else None,
            memory_reserved_mib=_mib(fb.value("reserved")) if fb else None,
            utilization_pct=number(gpu.value("utilization", "gpu_util") or "N/A"),
        )
        procs = gpu.child("processes")
        for proc in procs.children if procs is not None else []:
            if proc.tag != "process_info":
                continue
            pid = proc.value("pid")
            book.add_proc(
                snap,
                proc.line,
                lines[proc.line - 1],
                gpu=index,
                uuid=gpu.value("uuid"),
                pid=int(pid) if pid and pid.isdigit() else None,
                process_name=proc.value("process_name"),
                process_type=proc.value("type"),
                used_mib=_mib(proc.value("used_memory")),
            )
