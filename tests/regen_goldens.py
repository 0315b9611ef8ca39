"""Regenerate the golden reports of every fixture (or of the ones named).

    python -m tests.regen_goldens                    # all fixtures
    python -m tests.regen_goldens vllm-b-saturation  # one

Run it after a change to a renderer, a rule or a fixture's incident/ files, then review
the diff with `git diff fixtures/*/golden/` before committing.
"""

from __future__ import annotations

import sys
import time

from tests.conftest import fixture_cases
from tests.goldens import write_goldens


def main(names: list[str]) -> int:
    cases = fixture_cases()
    unknown = set(names) - {c.name for c in cases}
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
