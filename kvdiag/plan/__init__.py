"""`kvdiag plan INCIDENT -- FLAGS`: what this incident's traffic would have done under
another configuration, with the baseline's own error beside every prediction.

The incident is analysed as `analyze` would; its traffic (traffic.py) is replayed through
the scheduler model (sim.py) with a step time fitted to its own throughput (steptime.py),
first on its own configuration, which is compared with what was observed (validate.py),
then on each changed one (engine.py sizes the pool as the engine would).
"""

from __future__ import annotations

from kvdiag.domain.errors import NotPlannableError, PlanFlagError
from kvdiag.domain.records.plan import Plan
from kvdiag.plan.run import PlanOptions, plan_incident

__all__ = ["NotPlannableError", "Plan", "PlanFlagError", "PlanOptions", "plan_incident"]
