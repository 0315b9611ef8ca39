"""The metric alias table (data in formats/metric_aliases.toml), loaded and validated."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvdiag.analyzer.errors import FormatPackError

SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info")
METRIC_TYPES = ("gauge", "counter", "histogram", "info", "summary")


@dataclass(frozen=True, slots=True)
class MetricAlias:
    canonical: str
    names: tuple[str, ...]
    type: str
    unit: str
    doc: str


@dataclass(frozen=True, slots=True)
class AliasTable:
    metrics: tuple[MetricAlias, ...]
    prefix_rewrites: tuple[tuple[str, str], ...]

    def lookup_map(self) -> dict[str, tuple[str, str]]:
        """Exposed sample name -> (canonical, suffix), for every suffix a family can show."""
        out: dict[str, tuple[str, str]] = {}
        for m in self.metrics:
            for family in m.names:
                out.setdefault(family, (m.canonical, ""))
                for suffix in SUFFIXES:
                    out.setdefault(family + suffix, (m.canonical, suffix.lstrip("_")))
        return out

    def get(self, canonical: str) -> MetricAlias:
        for m in self.metrics:
            if m.canonical == canonical:
                return m
        raise KeyError(f"unknown canonical metric {canonical!r}")


def parse_aliases(text: str, where: str) -> AliasTable:
    """Parse and validate the alias table."""
    raw = tomllib.loads(text)
    if raw.get("schema") != 1:
        raise FormatPackError(f"{where}: unsupported schema {raw.get('schema')!r}")
    if unknown := set(raw) - {"schema", "metric", "prefix_rewrites"}:
        raise FormatPackError(f"{where}: unknown key(s) {sorted(unknown)}")
    metrics = []
    seen: dict[str, str] = {}
    for canonical, spec in raw.get("metric", {}).items():
        if unknown := set(spec) - {"names", "type", "unit", "doc"}:
            raise FormatPackError(f"{where}: metric.{canonical}: unknown key(s) {sorted(unknown)}")
        if spec.get("type") not in METRIC_TYPES:
            raise FormatPackError(
                f"{where}: metric.{canonical}: type must be one of {METRIC_TYPES}"
            )
        for name in spec["names"]:
            if name in seen:
                raise FormatPackError(
                    f"{where}: {name!r} is listed under both {seen[name]} and {canonical}"
                )
            seen[name] = canonical
        metrics.append(
            MetricAlias(
                canonical,
                tuple(spec["names"]),
                spec["type"],
                spec.get("unit", ""),
                spec.get("doc", ""),
            )
        )
    rewrites = tuple(raw.get("prefix_rewrites", {}).items())
    return AliasTable(tuple(metrics), rewrites)


@cache
def load_aliases() -> AliasTable:
    """The bundled alias table."""
    ref = resources.files("kvdiag.analyzer.ingest") / "formats" / "metric_aliases.toml"
    return parse_aliases(ref.read_text(encoding="utf-8"), "formats/metric_aliases.toml")
