"""Run the rules over the incident model, each in isolation, and collect their results.

A rule whose tables are empty is skipped with the reason; a rule that raises becomes an
engine problem and a `crashed` rule run, and the others still run. Rules yield findings,
reconciliation comparisons (filed under the rule's layer) and ruled-out arguments (why the
evidence speaks against the rule's class). Findings are sorted so output is deterministic.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvdiag.analyzer.model.incident import Incident
from kvdiag.domain.errors import NoSpaceError
from kvdiag.domain.records.diagnosis import Comparison, Finding, RuledOut, RuleRun
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.rules import RULES
from kvdiag.rules.base import Rule, RuleContext


@dataclass(frozen=True, slots=True)
class RulesOutcome:
    findings: tuple[Finding, ...]
    comparisons: tuple[tuple[int, Comparison], ...]  # (layer, comparison)
    runs: tuple[RuleRun, ...]
    problems: tuple[str, ...]
    ruled_out: tuple[RuledOut, ...] = ()


def selected_rules(
    opts: AnalyzeOptions, rules: Sequence[type[Rule]] | None = None
) -> list[type[Rule]]:
    rules = RULES if rules is None else rules
    chosen = [r for r in rules if not opts.select or {r.code, r.name} & set(opts.select)]
    return [r for r in chosen if not {r.code, r.name} & set(opts.ignore)]


def skip_reason(rule: type[Rule], reader: Incident) -> str | None:
    """Why a rule cannot run on this store, or None when it can."""
    empty = [t for t in rule.requires if not reader.has_rows(t)]
    if empty:
        return f"no rows in {', '.join(empty)}"
    if rule.requires_any and not any(reader.has_rows(t) for t in rule.requires_any):
        return f"no rows in any of {', '.join(rule.requires_any)}"
    return None


def thresholds_for(rule: type[Rule], overrides: Mapping[str, float]) -> dict[str, float]:
    values = rule.defaults()
    for key, value in overrides.items():
        code, _, name = key.partition(".")
        if code in (rule.code, rule.name) and name in values:
            values[name] = value
    return values


def run_rules(
    incident: Incident,
    opts: AnalyzeOptions,
    rules: Sequence[type[Rule]] | None = None,
) -> RulesOutcome:
    findings: list[Finding] = []
    comparisons: list[tuple[int, Comparison]] = []
    runs: list[RuleRun] = []
    problems: list[str] = []
    ruled_out: list[RuledOut] = []
    for rule_cls in selected_rules(opts, rules):
        reason = skip_reason(rule_cls, incident)
        if reason is not None:
            runs.append(RuleRun(rule_cls.code, rule_cls.name, "skipped", reason))
            continue
        rule = rule_cls()
        ctx = RuleContext(rule, incident, thresholds_for(rule_cls, opts.thresholds))
        try:
            produced = list(rule.check(ctx))
        except NoSpaceError:  # the store's disk, not the rule: the run cannot go on
            raise
        except Exception as exc:  # a broken rule must not take the analysis down
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            problems.append(f"rule {rule_cls.code} ({rule_cls.name}) crashed: {tb}")
            runs.append(RuleRun(rule_cls.code, rule_cls.name, "crashed", tb))
            continue
        mine = [p for p in produced if isinstance(p, Finding)]
        findings += mine
        comparisons += [(rule_cls.layer or 0, p) for p in produced if isinstance(p, Comparison)]
        ruled_out += [p for p in produced if isinstance(p, RuledOut)]
        runs.append(RuleRun(rule_cls.code, rule_cls.name, "ran", "", len(mine)))
    findings.sort(key=lambda f: (-f.severity.rank, f.code, f.replica or "", f.title))
    return RulesOutcome(
        tuple(findings), tuple(comparisons), tuple(runs), tuple(problems), tuple(ruled_out)
    )
