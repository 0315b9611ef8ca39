"""The canonical JSON form of the diagnosis (schema in kvdiag/reports/schema)."""

from __future__ import annotations

import json

from kvdiag.domain.records.diagnosis import Diagnosis


def render_json(diagnosis: Diagnosis) -> str:
    """Deterministic JSON: record field order, two-space indent, UTF-8 kept."""
    return json.dumps(diagnosis.to_dict(), indent=2, ensure_ascii=False) + "\n"
