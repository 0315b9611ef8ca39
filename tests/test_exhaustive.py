"""Whatever is added is wired in: formats, ingesters, incident classes, rules.

Each check finds its universe by introspection (the enum's members, the classes the
package's modules define, the files in a folder), never from a list kept by hand, and is
itself tested with a universe grown by one.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kvdiag.analyzer.ingest.base import Emit, IngestContext, Ingester, InputUnit
from kvdiag.analyzer.ingest.logs import vllm as vllm_module
from kvdiag.analyzer.ingest.registry import INGESTERS
from kvdiag.domain.records.diagnosis import Finding, IncidentClass, ReplicaVerdict, Severity
from kvdiag.reports import OutputFormat
from kvdiag.rules import RULES
from kvdiag.rules import kv301_saturation as saturation_module
from kvdiag.rules.base import Rule, RuleContext
from kvdiag.rules.engine import classify, fleet
from tests.conftest import ROOT, FixtureCase, fixture_cases
from tests.goldens import FILES, golden_dir
from tests.introspect import classes_defined_in, modules_under

RULES_DIR = ROOT / "kvdiag" / "rules"
# The enum's two verdicts that name no problem (its docstring): nothing to rank them against.
NOT_AN_INCIDENT = frozenset({IncidentClass.HEALTHY, IncidentClass.INSUFFICIENT_EVIDENCE})


def _grown(members: type[enum.StrEnum], name: str) -> type[enum.StrEnum]:
    """The enum with one member more (StrEnum members compare as their values)."""
    values = {m.name: m.value for m in members} | {name.upper(): name}
    return enum.StrEnum(f"Grown{members.__name__}", values)  # type: ignore[return-value]


# Every output format has a golden file, in every fixture.


def formats_without_a_golden(formats: Iterable[str], files: Mapping[str, str]) -> list[str]:
    return sorted(str(f) for f in formats if f not in set(files.values()))


def goldens_missing(cases: Iterable[FixtureCase], files: Iterable[str]) -> list[str]:
    return [
        f"{case.name}/golden/{name}"
        for case in cases
        for name in sorted(files)
        if not (golden_dir(case) / name).is_file()
    ]


def test_every_output_format_has_a_golden_in_every_fixture() -> None:
    assert formats_without_a_golden(OutputFormat, FILES) == []
    assert goldens_missing(fixture_cases(), FILES) == []


def test_the_golden_checks_catch_a_new_format_and_a_missing_file(tmp_path: Path) -> None:
    assert formats_without_a_golden(_grown(OutputFormat, "pdf"), FILES) == ["pdf"]
    case = FixtureCase("new-fixture", tmp_path / "new-fixture" / "incident", {})
    golden_dir(case).mkdir(parents=True)
    (golden_dir(case) / "report.txt").write_text("")
    assert goldens_missing([case], FILES) == [
        f"new-fixture/golden/{name}" for name in sorted(FILES) if name != "report.txt"
    ]


# Every ingester under kvdiag/analyzer/ingest is registered, each with its own kind.


def ingesters_defined() -> list[type[Ingester]]:
    found = classes_defined_in(modules_under("kvdiag.analyzer.ingest"), Ingester)
    return [cls for cls in found if not inspect.isabstract(cls)]


def unregistered(defined: Iterable[type], registered: Sequence[type]) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in defined if c not in registered]


def shared_kinds(registered: Iterable[type[Ingester]]) -> list[str]:
    return sorted(k for k, n in Counter(i.kind for i in registered).items() if n > 1)


class _DummyIngester(Ingester):
    """An ingester nobody registered."""

    kind = "dummy_log"
    description = "a log format kvdiag has never heard of"
    tables = ()

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        return 0

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        yield from ()


def test_every_ingester_is_registered_with_a_kind_of_its_own() -> None:
    assert unregistered(ingesters_defined(), INGESTERS) == []
    assert shared_kinds(INGESTERS) == []


def test_the_ingester_checks_catch_an_unregistered_one_and_a_shared_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _adopt(monkeypatch, vllm_module, _DummyIngester)
    name = f"{vllm_module.__name__}._DummyIngester"
    assert unregistered(ingesters_defined(), INGESTERS) == [name]
    monkeypatch.setattr(_DummyIngester, "kind", INGESTERS[0].kind)
    assert shared_kinds((*INGESTERS, _DummyIngester)) == [INGESTERS[0].kind]


def _adopt(monkeypatch: pytest.MonkeyPatch, module: ModuleType, cls: type) -> None:
    """Make `cls` look defined in `module`, for as long as the test runs."""
    monkeypatch.setattr(cls, "__module__", module.__name__)
    monkeypatch.setattr(module, cls.__name__, cls, raising=False)


# Every incident class can be ranked: the classifier's PRECEDENCE, and the fleet view's
# ordering of replicas, which calls PRECEDENCE.index() on every problem verdict.


def unranked(classes: Iterable[str]) -> list[str]:
    return sorted(
        str(c) for c in classes if c not in NOT_AN_INCIDENT and c not in classify.PRECEDENCE
    )


def fleet_cannot_order(classes: Iterable[Any]) -> list[str]:
    failed = []
    for cls in classes:
        row = ReplicaVerdict(
            replica="r0",
            primary=cls,
            severity=Severity.WARNING,
            codes=(),
            summary="",
            peak_kv_usage=0.9,
            p95_kv_usage=0.8,
            max_waiting=0,
            preemptions=0,
            requests=0,
            usage_gap=0.0,
            hot=False,
        )
        try:
            fleet._worst_first(row)
        except ValueError:
            failed.append(str(cls))
    return failed


def test_every_incident_class_is_ranked_by_the_classifier_and_the_fleet() -> None:
    assert unranked(IncidentClass) == []
    assert fleet_cannot_order(IncidentClass) == []
    assert not NOT_AN_INCIDENT & set(classify.PRECEDENCE)


def test_the_precedence_checks_catch_a_new_class() -> None:
    grown = _grown(IncidentClass, "cache_thrash")
    assert unranked(grown) == ["cache_thrash"]
    assert fleet_cannot_order(grown) == ["cache_thrash"]


# The accepted-inputs table (docs/inputs.md) names every ingester, by kind or by its description.


def accepted_inputs_table(page: str) -> str:
    section = re.search(r"^#+ Accepted inputs\n(.*?)(?=^#|\Z)", page, flags=re.M | re.S)
    assert section, "docs/inputs.md has no 'Accepted inputs' section"
    return section.group(1)


def missing_from_table(table: str, ingesters: Iterable[type[Ingester]]) -> list[str]:
    first_cells = re.findall(r"^\|([^|\n]*)\|", table, flags=re.M)
    named = {kind for cell in first_cells for kind in re.findall(r"`([^`]+)`", cell)}
    return [
        f"{i.__name__} (kind {i.kind!r}, {i.description!r})"
        for i in ingesters
        if i.kind not in named and i.description not in table
    ]


def test_the_table_of_accepted_inputs_names_every_ingester() -> None:
    table = accepted_inputs_table((ROOT / "docs" / "inputs.md").read_text())
    assert missing_from_table(table, INGESTERS) == []


def test_the_table_check_catches_an_ingester_it_does_not_name() -> None:
    table = "| kind | what |\n|---|---|\n| `vllm_log` | logs |\n"
    assert missing_from_table(table, [_DummyIngester]) == [
        "_DummyIngester (kind 'dummy_log', 'a log format kvdiag has never heard of')"
    ]
    described = table + f"| dummy | {_DummyIngester.description} |\n"
    assert missing_from_table(described, [_DummyIngester]) == []


# Every kv*.py under kvdiag/rules/ holds rules that are all registered, and every
# registered rule lives in one of them.


def rule_module_names() -> list[str]:
    return sorted(p.stem for p in RULES_DIR.glob("kv*.py"))


def rule_registry_problems(module_names: Sequence[str], registered: Sequence[type]) -> list[str]:
    problems = []
    for name in module_names:
        defined = classes_defined_in([importlib.import_module(f"kvdiag.rules.{name}")], Rule)
        problems += [f"kvdiag/rules/{name}.py defines no rule"] if not defined else []
        problems += [f"{name}.{c.__name__} is not in RULES" for c in defined if c not in registered]
    problems += [
        f"{rule.__name__} is registered but lives in {rule.__module__}"
        for rule in registered
        if rule.__module__.removeprefix("kvdiag.rules.") not in module_names
    ]
    return problems


class _DummyRule(Rule):
    """A rule nobody registered."""

    code = "KV999"
    name = "test.dummy"
    layer = None
    severity = Severity.WARNING

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        return ()


def test_every_rule_module_is_registered_and_every_rule_has_a_module() -> None:
    assert rule_registry_problems(rule_module_names(), RULES) == []


def test_the_rule_check_catches_an_unregistered_rule_and_a_stray_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert rule_registry_problems(rule_module_names(), (*RULES, _DummyRule)) == [
        f"_DummyRule is registered but lives in {__name__}"
    ]
    # `support` holds helpers: a kv*.py like it would be a module without a rule.
    assert rule_registry_problems([*rule_module_names(), "support"], RULES) == [
        "kvdiag/rules/support.py defines no rule"
    ]
    _adopt(monkeypatch, saturation_module, _DummyRule)
    assert rule_registry_problems(rule_module_names(), RULES) == [
        "kv301_saturation._DummyRule is not in RULES"
    ]
