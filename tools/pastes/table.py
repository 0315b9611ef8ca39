"""The table of the real pastes in fixtures/pastes: what a careful reader says, what kvdiag says.

    python -m tools.pastes.table                      # print the table
    python -m tools.pastes.table --write docs/pastes.md

Each paste (fixtures/pastes/INDEX.toml lists them, with their sources) is analysed alone,
as `kvdiag analyze FILE` would, and its verdict set beside the class a careful reader gives
the same paste (`reader_class`) and the verdict recorded when the paste was collected
(`kvdiag_before`). A third of the pastes are held out: they are never used to tune
kvdiag, so their match rate says how it does on pastes it was not fitted to.
tests/test_pastes.py checks the tuning set against a fresh analysis.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kvdiag.domain.errors import NoInputError
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze

ROOT = Path(__file__).resolve().parents[2]
PASTES = ROOT / "fixtures" / "pastes"
INDEX = PASTES / "INDEX.toml"
# What the table says when kvdiag reads nothing in a paste (`kvdiag analyze` exits 3).
UNREADABLE = "unreadable"
CLASSES = (
    "unservable_config",
    "memory_overcommit",
    "gpu_imbalance",
    "shrunken_pool",
    "replica_imbalance",
    "prefill_peak",
    "padding_waste",
    "saturation",
    "admission_limited",
    "healthy",
    "insufficient_evidence",
)
ENGINES = ("vllm", "sglang", "trtllm", "tgi", "lmcache", "dynamo")
HEADER = (
    "| paste | engine | reader | kvdiag before | kvdiag now | held out | match |\n"
    "|---|---|---|---|---|---|---|"
)


@dataclass(frozen=True, slots=True)
class Paste:
    """One [[paste]] entry of INDEX.toml."""

    file: str
    source: str
    engine: str
    version: str
    reader_class: str
    why: str
    held_out: bool
    kvdiag_before: str

    @property
    def path(self) -> Path:
        return PASTES / self.file


def pastes(index: Path = INDEX) -> list[Paste]:
    """Every entry of the index, in the order the pastes were collected."""
    entries = tomllib.loads(index.read_text())["paste"]
    return [Paste(**entry) for entry in entries]


def paste_files(folder: Path = PASTES) -> list[Path]:
    """Every paste file in the folder (the index describes them and is none)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != INDEX.name)


def verdict(path: Path) -> str:
    """verdict.primary of the paste analysed alone, or UNREADABLE when nothing was read."""
    with tempfile.TemporaryDirectory() as scratch:
        options = AnalyzeOptions(incident=path, db=Path(scratch) / "paste.duckdb")
        try:
            result = analyze(options)
        except NoInputError:
            return UNREADABLE
    return result.diagnosis.verdict.primary.value


@dataclass(frozen=True, slots=True)
class Row:
    paste: Paste
    now: str

    @property
    def match(self) -> bool:
        return self.now == self.paste.reader_class

    @property
    def false_saturation(self) -> bool:
        return self.now == "saturation" and self.paste.reader_class != "saturation"

    def markdown(self) -> str:
        p = self.paste
        cells = (
            f"`{p.file}`",
            p.engine,
            f"`{p.reader_class}`",
            f"`{p.kvdiag_before}`",
            f"`{self.now}`",
            "yes" if p.held_out else "no",
            "yes" if self.match else "**no**",
        )
        return "| " + " | ".join(cells) + " |"


def summary(name: str, rows: Iterable[Row]) -> str:
    """One line per set: matches now and when collected, and the false saturations."""
    rows = list(rows)
    now = sum(r.match for r in rows)
    before = sum(r.paste.kvdiag_before == r.paste.reader_class for r in rows)
    false_sat = sum(r.false_saturation for r in rows)
    return (
        f"{name}: {now}/{len(rows)} match the reader now ({before}/{len(rows)} when collected),"
        f" {false_sat} false saturation{'' if false_sat == 1 else 's'}"
    )


def table(rows: list[Row]) -> str:
    lines = [HEADER, *(r.markdown() for r in rows), ""]
    lines.append("- " + summary("tuning set", (r for r in rows if not r.paste.held_out)))
    lines.append("- " + summary("held-out set", (r for r in rows if r.paste.held_out)))
    return "\n".join(lines)


def page(rows: list[Row]) -> str:
    counts = ", ".join(
        f"{sum(r.paste.engine == e for r in rows)} {e}"
        for e in ENGINES
        if any(r.paste.engine == e for r in rows)
    )
    return "\n".join(
        [
            "# Real pastes: the reader's class and kvdiag's",
            "",
            "[Back to the README](../README.md)",
            "",
            f"{len(rows)} pastes ({counts}) that users put in public GitHub issues and"
            " pull requests: server logs, stats lines, /metrics text, tracebacks, verbatim and"
            " trimmed only at the ends (`fixtures/pastes/`, sources and reasons in its"
            " `INDEX.toml`). Each is analysed alone. *reader* is the class a careful reader"
            " gives the paste from the evidence in it (docs/domain.md); *kvdiag before* is"
            " kvdiag's verdict when the paste was collected; *kvdiag now* is a fresh analysis;"
            " `unreadable` means kvdiag read nothing in the paste. Held-out pastes are never"
            " used to tune kvdiag. `python -m tools.pastes.table --write docs/pastes.md`"
            " rebuilds this page; `tests/test_pastes.py` checks the tuning set.",
            "",
            table(rows),
            "",
        ]
    )


def rows(entries: list[Paste] | None = None) -> list[Row]:
    out = []
    for p in pastes() if entries is None else entries:
        out.append(Row(p, verdict(p.path)))
        print(f"{p.file}: {out[-1].now}", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the page here (docs/pastes.md)")
    args = parser.parse_args(argv)
    found = rows()
    if args.write is None:
        print(table(found))
        return 0
    args.write.write_text(page(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
