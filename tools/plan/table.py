"""The tables in docs/plan.md of how well `kvdiag plan` reproduces each real run, and its pairs.

    python -m tools.plan.table                # print the tables
    python -m tools.plan.table --write docs/plan.md

Each run's own traffic is replayed on its own configuration (the baseline) and set beside
what was observed; each pair's second run is predicted from the first with the one flag
that changed. tests/test_plan.py checks the page's rows against fresh plans.
"""

from __future__ import annotations

import argparse
import re
import sys
from functools import cache
from pathlib import Path

from kvdiag.domain.fmt import fmt_quantity
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.domain.records.plan import Outcome
from kvdiag.plan import Plan, PlanOptions, plan_incident
from kvdiag.plan.validate import within

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
PAGE = ROOT / "docs" / "plan.md"  # the page that holds the tables
START = "<!-- plan:start (tools/plan/table.py writes these tables) -->"
END = "<!-- plan:end -->"
# The runs of ../shared/realdata/vllm-cpu with traffic (copied into fixtures/), then ours.
RUNS = (
    "vllm-a-healthy",
    "vllm-b-saturation",
    "vllm-c-prefill-peak-noprefix",
    "vllm-c2-prefill-peak-prefix",
    "vllm-a2-max-num-seqs-1",
    "vllm-b2-saturation-larger-pool",
    "vllm-d-rate-1x",
    "vllm-d2-rate-2x-larger-pool",
    "vllm-d3-rate-1x-pool-doubled",
    "vllm-f-admission-limited",
    "vllm-f2-max-num-seqs-raised",
    "vllm-h-padding-waste",
    "vllm-h2-padding-block32",
    "vllm-i-ramp",
    "vllm-i2-ramp-pool-doubled",
    "vllm-j-queue-cap-rejects",
    "vllm-j3-rejections-full-pool",
    "vllm-k-long-among-short",
)
# (BEFORE, flags, AFTER): the plan from BEFORE predicts AFTER.
PAIRS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("vllm-b-saturation", ("--kv-cache-memory-bytes", "160M"), "vllm-b2-saturation-larger-pool"),
    ("vllm-h-padding-waste", ("--block-size", "32"), "vllm-h2-padding-block32"),
    ("vllm-f-admission-limited", ("--max-num-seqs", "32"), "vllm-f2-max-num-seqs-raised"),
    ("vllm-a-healthy", ("--max-num-seqs", "1"), "vllm-a2-max-num-seqs-1"),
    ("vllm-d-rate-1x", ("--kv-cache-memory-bytes", "64M"), "vllm-d3-rate-1x-pool-doubled"),
    ("vllm-i-ramp", ("--kv-cache-memory-bytes", "32M"), "vllm-i2-ramp-pool-doubled"),
)
ANY_FLAGS = ("--max-num-seqs", "1024")  # the baseline does not depend on the scenario


@cache
def planned(name: str, flags: tuple[str, ...] = ANY_FLAGS, knee: bool = False) -> Plan:
    """One plan per run, flags and knee per process (the tests share it)."""
    incident = FIXTURES / name / "incident"
    opts = AnalyzeOptions(incident=incident, label=name)
    return plan_incident(incident, opts, PlanOptions(flags, knee=knee))


def _pair(o: Outcome, s: Outcome, key: str, unit: str) -> str:
    return f"{fmt_quantity(o.get(key), unit)} / {fmt_quantity(s.get(key), unit)}"


def _cells(observed: Outcome, simulated: Outcome) -> list[str]:
    ok = within(observed, simulated)
    verdict = "yes" if all(ok.values()) else "no: " + ", ".join(k for k, v in ok.items() if not v)
    return [
        _pair(observed, simulated, "peak_kv_usage", "ratio"),
        _pair(observed, simulated, "max_waiting", ""),
        _pair(observed, simulated, "preemptions", ""),
        _pair(observed, simulated, "queue_time_p95_s", "s"),
        verdict,
    ]


HEAD = "peak KV usage | max waiting | preemptions | queue time p95 | within the bounds"


def run_rows() -> list[str]:
    rows = []
    for name in RUNS:
        p = planned(name)
        rows.append("| " + " | ".join([f"`{name}`", *_cells(p.observed, p.simulated)]) + " |")
    return rows


def pair_rows() -> list[str]:
    rows = []
    for before, flags, after in PAIRS:
        (scenario,) = planned(before, flags).scenarios
        observed = planned(after).observed
        first = f"`{before}` `{' '.join(flags)}` → `{after}`"
        rows.append("| " + " | ".join([first, *_cells(observed, scenario.predicted)]) + " |")
    return rows


def tables() -> str:
    return "\n".join(
        [
            START,
            "",
            f"| run (observed / replayed) | {HEAD} |",
            "|---|---|---|---|---|---|",
            *run_rows(),
            "",
            f"| pair: plan from the first run (observed second / predicted) | {HEAD} |",
            "|---|---|---|---|---|---|",
            *pair_rows(),
            "",
            END,
        ]
    )


def page_tables(text: str) -> str:
    found = re.search(re.escape(START) + r".*?" + re.escape(END), text, re.S)
    return found.group(0) if found else ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", type=Path, help=f"replace the tables in this page ({PAGE.relative_to(ROOT)})"
    )
    args = parser.parse_args(argv)
    fresh = tables()
    if args.write is None:
        print(fresh)
        return 0
    text = args.write.read_text()
    old = page_tables(text)
    if not old:
        print(f"{args.write}: no {START!r} marker", file=sys.stderr)
        return 2
    args.write.write_text(text.replace(old, fresh))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
