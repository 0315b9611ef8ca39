"""How long `kvdiag plan`'s simulator takes to replay a day of one-second traffic
(a benchmark, not a test): issue 30's target is under 10 s.

    python bench/plan_day.py                  # a day at 2 requests/s (172,800 requests)
    python bench/plan_day.py --rate 5 --hours 24

The traffic is Poisson arrivals with the lengths of the real run a-healthy (its client
log, cycled), replayed on that run's configuration and fitted step model, so the day is
one the engine can carry. Prints the simulated requests, the wall time, and the ratio to
the 10 s target.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdiag.analyzer.model.incident import kept_incident  # noqa: E402
from kvdiag.domain.records.options import AnalyzeOptions  # noqa: E402
from kvdiag.pipeline import analyze  # noqa: E402
from kvdiag.plan.engine import baseline_setup  # noqa: E402
from kvdiag.plan.sim import Request, simulate  # noqa: E402
from kvdiag.plan.steptime import fit_step_model  # noqa: E402

TARGET_S = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2.0, help="requests per second")
    parser.add_argument("--hours", type=float, default=24.0)
    args = parser.parse_args()
    incident = ROOT / "fixtures" / "vllm-a-healthy" / "incident"
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "a.duckdb"
        diagnosis = analyze(AnalyzeOptions(incident=incident, db=db)).diagnosis
        with kept_incident(db, diagnosis.facts) as model:
            settings = {k: v.value for k, v in model.stated_settings().items()}
            setup = baseline_setup(diagnosis.facts, settings)
            fit = fit_step_model(model.step_windows(setup.tokens), setup.budget)
            lengths = model.traffic().requests
    rng = random.Random(30)
    t, day, out = 0.0, args.hours * 3600, []
    while t < day:
        t += rng.expovariate(args.rate)
        src = lengths[len(out) % len(lengths)]
        out.append(Request(t, src.prompt, src.output))
    started = time.perf_counter()
    result = simulate(tuple(out), setup.engine(fit.model))
    took = time.perf_counter() - started
    print(
        json.dumps(
            {
                "requests": len(out),
                "simulated_hours": round(result.seconds / 3600, 2),
                "finished": result.finished,
                "wall_s": round(took, 2),
                "target_s": TARGET_S,
                "ratio_to_target": round(took / TARGET_S, 3),
                "met": took < TARGET_S,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
