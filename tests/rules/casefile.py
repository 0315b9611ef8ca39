"""Rule cases as data: load tests/rules/cases/KVxxx.toml into a Store and run one rule.

A case file holds `[[case]]` tables. Each case gives table rows directly
(`[case.tables] log_capacity_errors = [{...}]`), optional per-table defaults merged into
every row (`[case.defaults.metric_samples] source_path = "..."`), and optional `series`:
a compact form for scrape series, one metric sample per value, one scrape file per second,
with the raw exposition line rebuilt from the name and value so evidence has something to
point at. What the rule must produce: `expect` (codes), and optionally `severity`, `title`
(substrings), `remedies` (substrings of an action or rationale), `ruled_out` (substrings),
`comparisons` (substrings of quantities), `skipped` (substring of the skip reason), and
`set` (threshold overrides).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from kvdiag.analyzer import model as facts
from kvdiag.analyzer.model.incident import Incident
from kvdiag.analyzer.schema import table
from kvdiag.analyzer.store.database import Store
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.rules.engine import rule_runner

CASES_DIR = Path(__file__).parent / "cases"
_TYPES = {
    "VARCHAR": pl.String,
    "BIGINT": pl.Int64,
    "INTEGER": pl.Int32,
    "DOUBLE": pl.Float64,
    "TIMESTAMP": pl.Datetime("us"),
    "BOOLEAN": pl.Boolean,
}
_CASE_KEYS = {
    "name",
    "expect",
    "severity",
    "title",
    "remedies",
    "ruled_out",
    "comparisons",
    "skipped",
    "set",
    "tables",
    "defaults",
    "series",
    "note",
}


@dataclass(frozen=True)
class RuleCase:
    code: str
    name: str
    spec: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.code}-{self.name}"


def load_cases() -> list[RuleCase]:
    out = []
    for path in sorted(CASES_DIR.glob("KV*.toml")):
        doc = tomllib.loads(path.read_text())
        for spec in doc.get("case", []):
            unknown = set(spec) - _CASE_KEYS
            assert not unknown, f"{path.name} {spec.get('name')}: unknown keys {unknown}"
            out.append(RuleCase(path.stem, spec["name"], spec))
    return out


def _frame(name: str, rows: list[dict[str, Any]]) -> pl.DataFrame:
    declared = {c.name: c.type for c in table(name).columns}
    cols = list(dict.fromkeys(k for r in rows for k in r))
    unknown = [c for c in cols if c not in declared]
    assert not unknown, f"{name}: undeclared columns {unknown}"
    schema = {c: _TYPES[declared[c]] for c in cols}
    return pl.DataFrame([{c: r.get(c) for c in cols} for r in rows], schema=schema, orient="row")


def _series_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Expand `{metric, name, values, start, ...}` into metric_samples rows, one per second."""
    start: datetime = spec["start"]
    step = float(spec.get("step", 1))
    labels = spec.get("labels", 'engine="0",model_name="m"')
    rows = []
    for i, value in enumerate(spec["values"]):
        ts = start + timedelta(seconds=i * step)
        exposed = spec["name"] + {"total": "_total", "": ""}.get(spec.get("suffix", ""), "")
        rows.append(
            {
                "source_path": f"{spec.get('folder', 'metrics')}/{int(ts.timestamp())}.prom",
                "source_line": spec.get("line", 1),
                "raw": f"{exposed}{{{labels}}} {value}",
                "replica": spec.get("replica", "default"),
                "ts": ts,
                "metric": spec["metric"],
                "name": exposed,
                "suffix": spec.get("suffix", ""),
                "engine": spec.get("engine", "0"),
                "reason": spec.get("reason"),
                "le": spec.get("le"),
                "value": float(value),
            }
        )
    return rows


def build_store(case: RuleCase) -> Store:
    store = Store()
    defaults = case.spec.get("defaults", {})
    tables: dict[str, list[dict[str, Any]]] = {
        name: [defaults.get(name, {}) | row for row in rows]
        for name, rows in case.spec.get("tables", {}).items()
    }
    for series in case.spec.get("series", []):
        tables.setdefault("metric_samples", []).extend(_series_rows(series))
    for name, rows in tables.items():
        store.append(name, _frame(name, rows))
    return store


def run_case(case: RuleCase) -> rule_runner.RulesOutcome:
    store = build_store(case)
    try:
        reader = store.reader
        overrides = {f"{case.code}.{k}": float(v) for k, v in case.spec.get("set", {}).items()}
        opts = AnalyzeOptions(incident=Path("."), select=(case.code,), thresholds=overrides)
        return rule_runner.run_rules(Incident(reader, facts.establish(reader)), opts)
    finally:
        store.discard()
