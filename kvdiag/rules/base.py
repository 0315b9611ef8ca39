"""The rule contract: small classes that read the store and return findings.

A rule declares its code, name, layer, severity, the class it implies, the tables it
needs and its thresholds (with documented defaults, overridable from the CLI). The engine
skips a rule whose tables are empty, with the reason, and turns a rule that raises into a
listed engine problem instead of a crash.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import polars as pl

from kvdiag.analyzer.model.effective import EngineContext, effective_value
from kvdiag.analyzer.model.first_stated import first_config_rows
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.domain.records.diagnosis import (
    Comparison,
    Evidence,
    Fact,
    Finding,
    IncidentClass,
    Remedy,
    RuledOut,
    Scalar,
    Severity,
    SourceRef,
)

MAX_EVIDENCE = 8
EXCERPT_CHARS = 240
_CODE = re.compile(r"^KV[0-9]\d{2}$")
_NAME = re.compile(r"^[a-z]+\.[a-z_]+$")


@dataclass(frozen=True, slots=True)
class Threshold:
    """A tunable number a rule compares against, with its default and meaning."""

    name: str
    default: float
    unit: str
    doc: str


def fmt_ts(value: Any) -> str | None:
    """A timestamp as ISO text (seconds), or None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(value)


def excerpt(raw: str | None) -> str:
    text = (raw or "").strip()
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


class RuleContext:
    """What a rule may see: the store (read-only), the facts, its thresholds."""

    def __init__(
        self,
        rule: Rule,
        reader: StoreReader,
        facts: Mapping[str, Fact | tuple[Fact, ...]],
        thresholds: Mapping[str, float],
    ) -> None:
        self._rule = rule
        self.store = reader
        self.facts = facts
        self._thresholds = thresholds

    def sql(
        self, query: str, params: Sequence[Any] | None = None, *, large_result: bool = False
    ) -> pl.DataFrame:
        return self.store.sql(query, params, large_result=large_result)

    def has_rows(self, table_name: str) -> bool:
        return self.store.has_rows(table_name)

    def empty(self, table_name: str) -> pl.DataFrame:
        return self.store.empty(table_name)

    def threshold(self, name: str) -> float:
        return self._thresholds[name]

    def fact_value(self, name: str) -> Any:
        """A single fact's value, or None when absent (or per-scope only)."""
        fact = self.facts.get(name)
        return fact.value if isinstance(fact, Fact) else None

    def fact(self, name: str, replica: str | None = None) -> Fact | None:
        """A fact, or its value for one replica when it is scoped per replica."""
        fact = self.facts.get(name)
        if isinstance(fact, Fact):
            return fact
        if fact and replica is not None:
            for f in fact:
                if dict(f.scope).get("replica") == replica:
                    return f
        return None

    def config(self, key: str, replica: str | None = None) -> dict[str, Any] | None:
        """The stated value of a config key (with its provenance row), or None.

        Sources rank as the facts rank them (facts/effective.py): the engine's resolved
        config in metrics, then its log, then the launch command; aliases such as
        cache_config_info's `cache_dtype` count as the key. Rows recorded as defaults
        come last.
        """
        rows = self.store.memo(("config", replica), lambda: self._config_rows(replica))
        found = effective_value(key, rows, EngineContext())
        if found is not None and found.row is not None:
            return {**found.row, "value": found.value}
        # Rows recorded as a default (origin "default") rank last.
        defaults = [r for r in rows if r.get("key") == key and r.get("origin") == "default"]
        return dict(defaults[0]) if defaults else None

    def _config_rows(self, replica: str | None) -> list[dict[str, Any]]:
        """The config table's first statements (read once for all replicas), or one replica's:
        the later ones never win (facts/first_stated.py)."""
        rows = self.store.memo("config_rows", lambda: self.sql(first_config_rows()).to_dicts())
        return rows if replica is None else [r for r in rows if r.get("replica") == replica]

    def evidence(self, row: Mapping[str, Any], what: str, value: Any) -> Evidence:
        """Evidence from a store row that carries provenance columns (a metric sample's
        file, line and text are read back by its `sample_row` when the row lacks them; a
        line stored by reference is read from its file)."""
        if row.get("sample_row") is not None and (
            row.get("raw") is None or "source_path" not in row
        ):
            source = self.sample_source(int(row["sample_row"]))
            row = {**row, **source} if source is not None else row
        line = row.get("source_line")
        raw = row.get("raw")
        if raw is None and "raw" in row and line is not None and row.get("source_path"):
            raw = self.store.line_text(str(row["source_path"]), int(line))  # by reference
        return Evidence(
            path=str(row.get("source_path")),
            line=int(line) if line is not None else None,
            ts=fmt_ts(row.get("ts")),
            what=what,
            value=value,
            excerpt=excerpt(raw),
        )

    def sample_source(self, row_id: int) -> dict[str, Any] | None:
        """The file, line and text of a metric sample by its `sample_row`, read once."""
        query = "SELECT source_path, source_line, raw FROM metric_samples WHERE sample_row = ?"
        found = self.store.memo(("sample", row_id), lambda: self.sql(query, [row_id]))
        return found.row(0, named=True) if found.height else None

    def finding(
        self,
        title: str,
        evidence: Iterable[Evidence],
        remediation: Iterable[Remedy] = (),
        *,
        severity: Severity | None = None,
        replica: str | None = None,
        claimed: bool = True,
    ) -> Finding:
        """A finding stamped with this rule's code, name, layer and implied class;
        `claimed=False` when the evidence does not reach the class's line (Finding)."""
        unique = list(dict.fromkeys(evidence))
        return Finding(
            code=self._rule.code,
            name=self._rule.name,
            layer=self._rule.layer,
            severity=severity or self._rule.severity,
            title=title,
            evidence=tuple(unique[:MAX_EVIDENCE]),
            remediation=tuple(remediation),
            implies=self._rule.implies,
            evidence_total=len(unique),
            replica=replica,
            claimed=claimed,
        )

    def compare(
        self,
        quantity: str,
        expected: Scalar,
        observed: Scalar,
        unit: str | None,
        sources: Iterable[SourceRef | Evidence | Fact | None],
        note: str = "",
        *,
        threshold: bool = False,
        low: Scalar = None,
        high: Scalar = None,
    ) -> Comparison:
        """A reconciliation row: gap = observed - expected when both are numbers.

        `threshold`: `expected` is one of the rule's thresholds, not what a healthy system
        shows. `low`/`high`: the bounds of an estimated `observed`.
        """
        gap: Scalar = None
        if isinstance(expected, int | float) and isinstance(observed, int | float):
            gap = round(observed - expected, 4)
            if isinstance(gap, float) and gap.is_integer() and isinstance(expected, int):
                gap = int(gap)
        refs: list[SourceRef] = []
        for s in sources:
            ref = s.ref if isinstance(s, Evidence) else s.source if isinstance(s, Fact) else s
            if ref is not None and ref not in refs:
                refs.append(ref)
        kind = "threshold" if threshold else "healthy"
        return Comparison(
            quantity, expected, observed, gap, unit, tuple(refs), note, kind, low, high
        )

    def rule_out(self, reason: str) -> RuledOut:
        """Why the evidence argues against this rule's class."""
        assert self._rule.implies is not None
        return RuledOut(self._rule.implies, reason)


class Rule(ABC):
    """One check. Subclasses set the class attributes and implement `check`.

    The first docstring line is the rule's summary in `kvdiag rules`.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    layer: ClassVar[int | None]
    severity: ClassVar[Severity]
    implies: ClassVar[IncidentClass | None] = None
    requires: ClassVar[tuple[str, ...]] = ()  # tables that must all have rows
    requires_any: ClassVar[tuple[str, ...]] = ()  # at least one of these must have rows
    thresholds: ClassVar[tuple[Threshold, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not _CODE.match(cls.code):
            raise TypeError(f"{cls.__name__}: code {cls.code!r} must look like KV301")
        if not _NAME.match(cls.name):
            raise TypeError(f"{cls.__name__}: name {cls.name!r} must look like layer.snake_case")
        if not (cls.__doc__ or "").strip():
            raise TypeError(f"{cls.__name__}: a rule needs a docstring (its summary)")

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0]

    @classmethod
    def defaults(cls) -> dict[str, float]:
        return {t.name: t.default for t in cls.thresholds}

    @abstractmethod
    def check(self, ctx: RuleContext) -> Iterable[Finding | Comparison | RuledOut]:
        """Yield findings, reconciliation comparisons and ruled-out arguments."""
