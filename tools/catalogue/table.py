"""The catalogue table: messages merged across releases, read and written as TSV.

One row per (engine, level, message template). The columns the extractor computes are
rewritten on every run; `pack_entry`, `why_none` and `values` are filled by hand (with
tools/catalogue/fill.py's help) and carried over from the existing table by that key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tools.catalogue.sources import Message

COLUMNS = (
    "engine",
    "level",
    "message",
    "first_release",
    "last_release",
    "releases",
    "backends",
    "source",
    "args",
    "pack_entry",
    "why_none",
    "values",
)
HAND_COLUMNS = ("pack_entry", "why_none", "values")

# Path parts that tie a message to one device backend (vLLM's platform, worker, executor
# and attention files; SGLang's hardware-specific modules).
_BACKENDS = (
    ("cpu", re.compile(r"(?:^|[/_])cpu(?:[/_.]|$)")),
    ("hpu", re.compile(r"(?:^|[/_])(?:hpu|habana|gaudi)(?:[/_.]|$)")),
    ("xpu", re.compile(r"(?:^|[/_])(?:xpu|ipex)(?:[/_.]|$)")),
    ("tpu", re.compile(r"(?:^|[/_])(?:tpu|pallas)(?:[/_.]|$)")),
    ("neuron", re.compile(r"(?:^|[/_])neuron")),
    ("rocm", re.compile(r"(?:^|[/_])(?:rocm|amd|aiter|hip)(?:[/_.]|$)")),
    ("openvino", re.compile(r"openvino")),
    ("npu", re.compile(r"(?:^|[/_])(?:npu|ascend)(?:[/_.]|$)")),
    ("cuda", re.compile(r"(?:^|[/_])(?:cuda|gpu)(?:[/_.]|$)")),
)


def backend_of(path: str) -> str:
    """The backend a file belongs to, or '' when it serves them all."""
    for name, pattern in _BACKENDS:
        if pattern.search(path):
            return name
    return ""


def version_key(version: str) -> tuple[int, ...]:
    """Sortable key: 0.6.6.post1 -> (0, 6, 6, 1), 0.4.0 -> (0, 4, 0, 0)."""
    parts = [int(p) for p in re.findall(r"\d+", version)]
    return tuple(parts + [0] * (4 - len(parts)))


def escape_cell(text: str) -> str:
    """A cell without raw tabs or newlines (backslash escapes, undone by `unescape_cell`)."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def unescape_cell(text: str) -> str:
    table = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
    return re.sub(r"\\(.)", lambda m: table.get(m[1], "\\" + m[1]), text)


@dataclass
class Row:
    engine: str
    level: str
    message: str
    found: dict[str, list[Message]] = field(default_factory=dict)  # release -> sites
    cells: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.engine, self.level, self.message)


def _ranges(present: list[str], scanned: list[str]) -> str:
    """'0.2.7-0.4.3,0.6.6': runs of consecutive scanned releases that hold the message."""
    runs: list[list[str]] = []
    previous = -2
    for version in present:
        index = scanned.index(version)
        if index == previous + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
        previous = index
    return ",".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def computed_cells(row: Row, scanned: list[str]) -> dict[str, str]:
    present = sorted(row.found, key=version_key)
    newest = row.found[present[-1]]
    sites = sorted({(m.path, m.line) for m in newest})
    source = f"{sites[0][0]}:{sites[0][1]}" + (f" (+{len(sites) - 1})" if len(sites) > 1 else "")
    backends = {backend_of(m.path) for sites_ in row.found.values() for m in sites_}
    args = [[h.expr, h.spec] for h in newest[0].template.holes]
    return {
        "engine": row.engine,
        "level": row.level,
        "message": row.message,
        "first_release": present[0],
        "last_release": present[-1],
        "releases": _ranges(present, scanned),
        "backends": "all" if "" in backends else ",".join(sorted(backends)),
        "source": source,
        "args": json.dumps(args, ensure_ascii=False),
    }


def merge(found: Iterable[tuple[str, str, Message]]) -> dict[tuple[str, str, str], Row]:
    """(engine, release, message) sites grouped into rows by template."""
    rows: dict[tuple[str, str, str], Row] = {}
    for engine, release, message in found:
        key = (engine, message.level, message.template.text)
        row = rows.setdefault(key, Row(engine, message.level, message.template.text))
        row.found.setdefault(release, []).append(message)
    return rows


def read_table(path: Path) -> list[dict[str, str]]:
    """The table's rows as dicts of unescaped cells."""
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    header = lines[0].split("\t")
    return [dict(zip(header, map(unescape_cell, ln.split("\t")), strict=True)) for ln in lines[1:]]


def write_table(path: Path, rows: list[dict[str, str]], preamble: str) -> None:
    out = [f"# {line}".rstrip() for line in preamble.splitlines()]
    out.append("\t".join(COLUMNS))
    out += ["\t".join(escape_cell(r.get(c, "")) for c in COLUMNS) for r in rows]
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
