"""KV105: the engine failed to start for a reason that is not KV capacity."""

from __future__ import annotations

from collections.abc import Iterable

from kvdiag.analyzer.model.quantities.refusals import (
    MEMORY_REFUSALS,
    NO_KV_ROOM,
    ONE_REQUEST_UNFIT,
    STATE_SLOTS_SHORT,
)
from kvdiag.domain.records.diagnosis import Finding, Remedy, Severity
from kvdiag.rules.base import Rule, RuleContext

# Refusals that are about the pool or memory belong to KV101 / KV103, which explain them
# better (every backend's wording: analyzer/model/quantities/refusals.py).
_CAPACITY_EVENTS = (
    "needs_more_kv",
    "max_len_exceeds_pool",
    "sglang_pool_below_context",
    *NO_KV_ROOM,
    *ONE_REQUEST_UNFIT,
    *STATE_SLOTS_SHORT,
    *MEMORY_REFUSALS,
)


class EngineStartFailed(Rule):
    """The engine never started, and not for lack of KV memory: no KV verdict is possible.

    Evidence: the engine core's `EngineCore failed to start` and a worker's root cause
    (`Worker failed with error '...'`), with no capacity refusal beside them (those are
    KV101's and KV103's). The finding implies no incident class: the verdict stays
    insufficient_evidence, and its summary names the start-up error instead of a list of
    missing files, because that error is what the on-call engineer must fix first.
    """

    code = "KV105"
    name = "startup.engine_failed"
    layer = None
    severity = Severity.ERROR
    implies = None
    requires = ("log_capacity_errors",)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        rows = ctx.sql(
            "SELECT * FROM log_capacity_errors ORDER BY ts NULLS LAST, source_path, source_line"
        )
        if rows.is_empty() or rows["event"].is_in(list(_CAPACITY_EVENTS)).any():
            return
        failed = rows.filter(rows["event"].is_in(["worker_failed", "engine_start_failed"]))
        if failed.is_empty():
            return
        # The worker's message is the root cause; the engine core only says it gave up.
        causes = failed.filter(failed["event"] == "worker_failed")["message"].drop_nulls()
        cause = causes[0] if causes.len() else "see the traceback around the cited lines"
        evidence = [ctx.evidence(r, str(r["event"]), r["message"] or "") for r in failed.to_dicts()]
        yield ctx.finding(
            f"The engine failed to start: {cause} (not a KV capacity refusal)",
            evidence,
            (
                Remedy(
                    "fix the start-up error first",
                    f"{cause}; with no engine running there is no KV pool or load to judge",
                ),
            ),
        )
