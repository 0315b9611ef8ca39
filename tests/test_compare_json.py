"""The compare JSON validates against its shipped schema, which keeps up with the record."""

from __future__ import annotations

import copy
import dataclasses
import json
from importlib import resources
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from kvdiag.domain.records import comparison as record
from tests.test_compare_pairs import compared


def _schema(name: str) -> dict[str, Any]:
    text = resources.files("kvdiag.reports").joinpath(f"schema/{name}.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


SCHEMA = _schema("compare")
REGISTRY = Registry().with_resource(
    "urn:kvdiag:schema:diagnosis:1", Resource.from_contents(_schema("diagnosis"))
)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, registry=REGISTRY)
RECORDS = {
    "Quantity": record.Quantity,
    "LoadComparison": record.LoadComparison,
    "SettingChange": record.SettingChange,
    "LayerChange": record.LayerChange,
    "RemedyCheck": record.RemedyCheck,
}


def _doc() -> dict[str, Any]:
    r = compared("vllm-c-prefill-peak-noprefix", "vllm-c2-prefill-peak-prefix")
    return json.loads(json.dumps(r.to_dict()))  # type: ignore[no-any-return]


def test_schema_is_valid_and_a_real_comparison_validates() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    errors = list(VALIDATOR.iter_errors(_doc()))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def test_a_broken_document_fails() -> None:
    doc = _doc()
    broken = copy.deepcopy(doc)
    broken["outcome"] = "probably_fine"
    assert not VALIDATOR.is_valid(broken)
    broken = copy.deepcopy(doc)
    del broken["before"]["verdict"]["primary"]  # checked through the diagnosis schema
    assert not VALIDATOR.is_valid(broken)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_schema_lists_every_field_of_the_record(name: str) -> None:
    fields = {f.name for f in dataclasses.fields(RECORDS[name])}
    assert set(SCHEMA["$defs"][name]["required"]) == fields
    assert set(SCHEMA["$defs"][name]["properties"]) == fields


def test_top_level_and_outcomes_follow_the_record() -> None:
    r = compared("vllm-c-prefill-peak-noprefix", "vllm-c2-prefill-peak-prefix")
    assert set(SCHEMA["required"]) == set(r.to_dict())
    assert SCHEMA["$defs"]["Outcome"]["enum"] == [o.value for o in record.Outcome]
