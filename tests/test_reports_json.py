"""The JSON record validates against the shipped schema, and the schema keeps up with the model."""

from __future__ import annotations

import copy
import dataclasses
import json
from importlib import resources
from typing import Any

import jsonschema
import pytest

from kvdiag.domain.records import diagnosis
from kvdiag.reports import OutputFormat, render
from tests.conftest import fixture_cases
from tests.goldens import fixture_diagnosis

CASES = fixture_cases()
SCHEMA: dict[str, Any] = json.loads(
    resources.files("kvdiag.reports").joinpath("schema/diagnosis.schema.json").read_text()
)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

# schema definition -> the record it describes
RECORDS: dict[str, type] = {
    "Verdict": diagnosis.Verdict,
    "RuledOut": diagnosis.RuledOut,
    "Evidence": diagnosis.Evidence,
    "Remedy": diagnosis.Remedy,
    "Finding": diagnosis.Finding,
    "Fact": diagnosis.Fact,
    "SourceRef": diagnosis.SourceRef,
    "Comparison": diagnosis.Comparison,
    "LayerResult": diagnosis.LayerResult,
    "UnmatchedTemplate": diagnosis.UnmatchedTemplate,
    "InputRecord": diagnosis.InputRecord,
    "InputProblem": diagnosis.InputProblem,
    "MissingEvidence": diagnosis.MissingEvidence,
    "RuleRun": diagnosis.RuleRun,
    "Series": diagnosis.Series,
}


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def _output(name: str) -> dict[str, Any]:
    """What `kvdiag analyze --format json` prints for the fixture."""
    doc: dict[str, Any] = json.loads(render(fixture_diagnosis(name), OutputFormat.JSON))
    return doc


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_every_fixture_output_validates(name: str) -> None:
    doc = _output(name)
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def test_missing_required_key_or_bad_value_fails() -> None:
    doc = _output("vllm-b-saturation")
    broken = copy.deepcopy(doc)
    del broken["findings"][0]["evidence"][0]["line"]
    assert not VALIDATOR.is_valid(broken)
    broken = copy.deepcopy(doc)
    broken["verdict"]["primary"] = "on_fire"
    assert not VALIDATOR.is_valid(broken)
    grown = copy.deepcopy(doc)
    grown["findings"][0]["labels"] = {"engine": "0"}  # a key a later version may add
    assert VALIDATOR.is_valid(grown)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_schema_lists_every_field_of_the_record_as_required(name: str) -> None:
    fields = {
        "class" if f.name == "incident_class" else f.name for f in dataclasses.fields(RECORDS[name])
    }
    definition = SCHEMA["$defs"][name]
    assert set(definition["required"]) == fields
    assert set(definition["properties"]) == fields


def test_top_level_and_enums_follow_the_model() -> None:
    assert set(SCHEMA["required"]) == {f.name for f in dataclasses.fields(diagnosis.Diagnosis)}
    for enum_type, definition in (
        (diagnosis.IncidentClass, "IncidentClass"),
        (diagnosis.Severity, "Severity"),
        (diagnosis.Confidence, "Confidence"),
    ):
        assert SCHEMA["$defs"][definition]["enum"] == [e.value for e in enum_type]
