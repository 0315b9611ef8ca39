"""The options of one analysis, frozen: the CLI builds them, the pipeline reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvdiag.domain.records.diagnosis import Severity


@dataclass(frozen=True, slots=True)
class AnalyzeOptions:
    """Everything `analyze` needs besides the incident itself."""

    incident: Path
    db: Path | None = None  # keep the DuckDB database here
    year: int | None = None  # year of log lines that print none
    fail_on: Severity | None = Severity.ERROR  # None = never fail
    select: tuple[str, ...] = ()  # only these rules (codes or names)
    ignore: tuple[str, ...] = ()  # not these rules
    thresholds: Mapping[str, float] = field(default_factory=dict)  # "KV301.usage_full" -> 0.95
    label: str | None = None  # incident name shown in reports (default: folder name)
    model_config: Path | None = None  # a config.json outside (or inside) the folder
