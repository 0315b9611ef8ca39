"""The table in docs/fragments.md: each shared issue fragment analysed alone, with its verdict.

    python -m tools.fragments.table                # print the table
    python -m tools.fragments.table --write docs/fragments.md

The fragments are real pastes from public issues (../shared/realdata/issues, see its
INDEX.md). The table says what kvdiag concludes from each file alone and why, so a reader
can check every row against the fragment; tests/test_fragment_table.py checks the page's
rows against a fresh analysis.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "fragments.md"  # the page that holds the table
FRAGMENTS = Path(os.environ.get("KVDIAG_SHARED", ROOT.parent / "shared")) / "realdata" / "issues"
START = "<!-- fragments:start (tools/fragments/table.py writes this table) -->"
END = "<!-- fragments:end -->"
HEADER = (
    "| fragment | verdict | confidence | lines read | why (kvdiag's summary) |\n"
    "|---|---|---|---|---|"
)
WHY_CHARS = 220


@dataclass(frozen=True, slots=True)
class Row:
    fragment: str
    verdict: str
    confidence: str
    lines_read: str  # "parsed/total" over the fragment's lines
    why: str

    def markdown(self) -> str:
        cells = (f"`{self.fragment}`", f"`{self.verdict}`", self.confidence, self.lines_read)
        return "| " + " | ".join((*cells, self.why.replace("|", "\\|"))) + " |"


def fragments(folder: Path = FRAGMENTS) -> list[Path]:
    """Every fragment file (INDEX.md describes them and is none)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != "INDEX.md")


def shorten(text: str, limit: int = WHY_CHARS) -> str:
    """The summary up to `limit` characters, cut at a word, with an ellipsis when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + " …"


def row_of(path: Path, diagnosis: Diagnosis) -> Row:
    used = [i for i in diagnosis.inputs if i.path.endswith(path.name)]
    total = sum(i.lines_total for i in used)
    parsed = sum(i.lines_parsed for i in used)
    verdict = diagnosis.verdict
    return Row(
        path.name,
        verdict.primary.value,
        verdict.confidence.value,
        f"{parsed}/{total}",
        shorten(verdict.summary),
    )


def analyse(path: Path) -> Row:
    with tempfile.TemporaryDirectory() as scratch:
        result = analyze(AnalyzeOptions(incident=path, db=Path(scratch) / "f.duckdb"))
    return row_of(path, result.diagnosis)


def table(rows: list[Row]) -> str:
    return "\n".join([START, HEADER, *(r.markdown() for r in rows), END])


def page_rows(page: str) -> dict[str, list[str]]:
    """The table's rows in a page: fragment name -> its cells, as written."""
    inside = page.split(START, 1)[1].split(END, 1)[0]
    rows = {}
    for line in inside.splitlines()[3:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = cells
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", type=Path, help=f"replace the table in this page ({PAGE.relative_to(ROOT)})"
    )
    args = parser.parse_args(argv)
    rows = []
    for path in fragments():
        rows.append(analyse(path))
        print(f"{path.name}: {rows[-1].verdict}", file=sys.stderr)
    text = table(rows)
    if args.write is None:
        print(text)
        return 0
    page = args.write.read_text()
    before, rest = page.split(START, 1)
    after = rest.split(END, 1)[1]
    args.write.write_text(before + text + after)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
