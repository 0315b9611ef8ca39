"""The canonical JSON form of a comparison (schema in kvdiag/reports/schema)."""

from __future__ import annotations

import json

from kvdiag.domain.records.comparison import BeforeAfter


def render_compare_json(r: BeforeAfter) -> str:
    """Deterministic JSON: record field order, two-space indent, UTF-8 kept."""
    return json.dumps(r.to_dict(), indent=2, ensure_ascii=False) + "\n"
