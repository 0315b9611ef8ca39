"""The metric alias table (data in metric_aliases.toml beside it), loaded and validated.

Every metric ingester (exposition text, Prometheus API JSON, Grafana CSV) resolves exposed
sample names through `AliasTable.resolve`, so the store only ever holds canonical names.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

import polars as pl

from kvdiag.domain.errors import FormatPackError

SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info")
METRIC_TYPES = ("gauge", "counter", "histogram", "info", "summary")
_METRIC_KEYS = {"names", "type", "unit", "doc", "samples", "range"}
_TOP_KEYS = {"schema", "metric", "prefix_rewrites", "unit_ranges", "replica_labels"}
Range = tuple[float, float]


@dataclass(frozen=True, slots=True)
class MetricAlias:
    canonical: str
    names: tuple[str, ...]
    type: str
    unit: str
    doc: str
    samples: tuple[str, ...] = ()
    range: Range = (float("-inf"), float("inf"))  # plausible values (validate.py)


@dataclass(frozen=True, slots=True)
class AliasTable:
    metrics: tuple[MetricAlias, ...]
    prefix_rewrites: tuple[tuple[str, str], ...]
    # Labels naming the replica a series belongs to, each for the families whose exposed name
    # starts with one of its prefixes ("" for all), the first present winning; without any,
    # the folder the file sits in. A series of one process about another (Dynamo's frontend
    # gauges per worker) names that other by a label of its own, which other families use
    # for something else (LMCache's worker_id is the TP rank): hence the prefixes.
    replica_labels: tuple[tuple[str, tuple[str, ...]], ...] = (("instance", ("",)),)

    def replica_label_names(self) -> tuple[str, ...]:
        return tuple(label for label, _ in self.replica_labels)

    def lookup_map(self) -> dict[str, tuple[str, str]]:
        """Exposed sample name -> (canonical, suffix), for every suffix a family can show."""
        out: dict[str, tuple[str, str]] = {}
        for m in self.metrics:
            for family in m.names:
                out.setdefault(family, (m.canonical, ""))
                for suffix in SUFFIXES:
                    out.setdefault(family + suffix, (m.canonical, suffix.lstrip("_")))
        return out

    @cache  # noqa: B019 - the table is immutable and loaded once
    def lookup_frame(self) -> pl.DataFrame:
        """The lookup map as a frame: name, metric, suffix, type (for joins)."""
        types = {m.canonical: m.type for m in self.metrics}
        lookup = self.lookup_map()
        return pl.DataFrame(
            {
                "name": list(lookup),
                "metric": [v[0] for v in lookup.values()],
                "suffix": [v[1] for v in lookup.values()],
                "type": [types[v[0]] for v in lookup.values()],
            }
        )

    def rewrite(self, name: pl.Expr) -> pl.Expr:
        """The exposed name with deployment prefixes (ray_vllm:) rewritten to the engine's."""
        for old, new in self.prefix_rewrites:
            name = (
                pl.when(name.str.starts_with(old))
                .then(pl.lit(new) + name.str.slice(len(old)))
                .otherwise(name)
            )
        return name

    def resolve(self, frame: pl.DataFrame, column: str = "name") -> pl.DataFrame:
        """Add metric, suffix and type to the rows whose `column` names a known metric.

        Rows naming no known metric are dropped: only aliased metrics are stored.
        """
        key = self.rewrite(pl.col(column)).alias("_lookup")
        return (
            frame.with_columns(key)
            .join(self.lookup_frame().rename({"name": "_lookup"}), on="_lookup", how="inner")
            .drop("_lookup")
        )

    @cache  # noqa: B019 - the table is immutable and loaded once
    def line_prefilter(self) -> str:
        """A regex that every exposition line of a known metric matches (and few others).

        It is a cheap DFA test run over every sample line before the heavier parsing,
        which then only sees the lines that will be stored.
        """
        rewritten: dict[str, list[str]] = {}
        for old, new in self.prefix_rewrites:
            rewritten.setdefault(new, [new]).append(old)
        branches = []
        families = sorted({f for m in self.metrics for f in m.names})
        for target, prefixes in rewritten.items():
            rests = [f[len(target) :] for f in families if f.startswith(target)]
            if rests:
                branches.append(_alt(prefixes) + _alt(rests))
        branches += [re.escape(f) for f in families if not f.startswith(tuple(rewritten))]
        suffixes = _alt(list(SUFFIXES))
        return rf"^(?:{'|'.join(branches)}){suffixes}?(?:\{{|[ \t])"

    def get(self, canonical: str) -> MetricAlias:
        for m in self.metrics:
            if m.canonical == canonical:
                return m
        raise KeyError(f"unknown canonical metric {canonical!r}")


def _alt(words: list[str]) -> str:
    return "(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + ")"


def parse_aliases(text: str, where: str) -> AliasTable:
    """Parse and validate the alias table."""
    raw = tomllib.loads(text)
    if raw.get("schema") != 1:
        raise FormatPackError(f"{where}: unsupported schema {raw.get('schema')!r}")
    if unknown := set(raw) - _TOP_KEYS:
        raise FormatPackError(f"{where}: unknown key(s) {sorted(unknown)}")
    unit_ranges = {
        u: _range(r, f"{where}: unit_ranges.{u}") for u, r in raw.get("unit_ranges", {}).items()
    }
    metrics = []
    seen: dict[str, str] = {}
    for canonical, spec in raw.get("metric", {}).items():
        if unknown := set(spec) - _METRIC_KEYS:
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
        unit = spec.get("unit", "")
        if "range" in spec:
            plausible = _range(spec["range"], f"{where}: metric.{canonical}.range")
        elif unit in unit_ranges:
            plausible = unit_ranges[unit]
        else:
            raise FormatPackError(
                f"{where}: metric.{canonical}: unit {unit!r} has no unit_ranges entry"
            )
        metrics.append(
            MetricAlias(
                canonical,
                tuple(spec["names"]),
                spec["type"],
                unit,
                spec.get("doc", ""),
                tuple(spec.get("samples", ())),
                plausible,
            )
        )
    rewrites = tuple(raw.get("prefix_rewrites", {}).items())
    labels = raw.get("replica_labels", {"instance": [""]})
    if not isinstance(labels, dict) or not all(
        isinstance(p, list) and all(isinstance(x, str) for x in p) for p in labels.values()
    ):
        raise FormatPackError(f"{where}: replica_labels maps a label to a list of name prefixes")
    return AliasTable(tuple(metrics), rewrites, tuple((k, tuple(v)) for k, v in labels.items()))


def _range(value: object, where: str) -> Range:
    """A [low, high] pair of numbers (TOML's inf allowed), low <= high."""
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        or value[0] > value[1]
    ):
        raise FormatPackError(f"{where}: must be [low, high] with low <= high, got {value!r}")
    return float(value[0]), float(value[1])


@cache
def load_aliases() -> AliasTable:
    """The bundled alias table."""
    ref = resources.files("kvdiag.analyzer.schema") / "metric_aliases.toml"
    return parse_aliases(ref.read_text(encoding="utf-8"), "formats/metric_aliases.toml")
