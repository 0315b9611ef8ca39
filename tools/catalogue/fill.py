"""Fill the catalogue's pack_entry and why_none: run each row's sample through the packs.

    .venv/bin/python -m tools.catalogue.fill --table kvdiag/analyzer/ingest/logs/catalogue.tsv

A row whose sample parses to a pack event gets that event as `pack_entry` (and no
`why_none`); the others get the reason of tools/catalogue/reasons.py. Cells already
filled are kept unless `--redo`; rows whose kept pack_entry no longer matches what the
sample parses to are listed (the packs or the table changed).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from tools.catalogue.check import outcomes
from tools.catalogue.reasons import reason_for
from tools.catalogue.table import read_table, write_table
from tools.catalogue.values import values_for


def _preamble(path: Path) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(ln.removeprefix("#").removeprefix(" ") for ln in lines if ln.startswith("#"))


def fill_rows(rows: list[dict[str, str]], redo: bool) -> list[str]:
    """Fill the hand columns in place; returns the rows whose pack_entry went stale."""
    for row in rows:
        if redo or not row["values"]:
            row["values"] = values_for(row)
    stale = []
    for row, outcome in zip(rows, outcomes(rows), strict=True):
        if outcome.events:
            if row["pack_entry"] and row["pack_entry"] != outcome.entry and not redo:
                stale.append(f"{row['pack_entry']} -> {outcome.entry or '-'}: {outcome.sample}")
            row["pack_entry"], row["why_none"] = outcome.entry, ""
        elif redo or not (row["pack_entry"] or row["why_none"]):
            if row["pack_entry"]:
                stale.append(f"{row['pack_entry']} -> -: {outcome.sample}")
            row["pack_entry"], row["why_none"] = "", reason_for(row)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--redo", action="store_true", help="recompute every hand cell")
    args = parser.parse_args(argv)
    rows = read_table(args.table)
    stale = fill_rows(rows, args.redo)
    write_table(args.table, rows, _preamble(args.table))
    kinds = Counter(r["why_none"].split(":")[0] if r["why_none"] else "pack entry" for r in rows)
    print(", ".join(f"{n} {k}" for k, n in kinds.most_common()))
    for line in stale:
        print("stale:", line)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
