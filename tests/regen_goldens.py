"""Regenerate the golden reports of every fixture (or of the ones named).

    python -m tests.regen_goldens                    # all fixtures
    python -m tests.regen_goldens vllm-b-saturation  # one
    python -m tests.regen_goldens pairs/b-larger-pool  # one BEFORE/AFTER pair's compare reports

Run it after a change to a renderer, a rule or a fixture's incident/ files, then review
the diff with `git diff fixtures/*/golden/` before committing.
"""

from __future__ import annotations

import sys
import time

from tests.conftest import fixture_cases
from tests.goldens import pair_names, write_goldens, write_pair_goldens


def main(names: list[str]) -> int:
    cases = fixture_cases()
    pairs = pair_names()
    unknown = set(names) - {c.name for c in cases} - {f"pairs/{p}" for p in pairs}
    if unknown:
        print(f"unknown fixtures: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    for case in cases:
        if names and case.name not in names:
            continue
        started = time.perf_counter()
        written = write_goldens(case)
        took = time.perf_counter() - started
        print(f"{case.name}: wrote {len(written)} files in {took:.1f} s")
    for pair in pairs:
        if names and f"pairs/{pair}" not in names:
            continue
        started = time.perf_counter()
        written = write_pair_goldens(pair)
        took = time.perf_counter() - started
        print(f"pairs/{pair}: wrote {len(written)} files in {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
