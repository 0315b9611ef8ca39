"""`kvdiag formats`: how well the declared formats cover a file, and what they miss.

A new vLLM release shows up here as "coverage fell to 61 %" with the shapes of the lines
no format matched (numbers, hex and ids masked), most frequent first, so the missing
format can be declared from real lines.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.base import Account, IngestContext, InputUnit
from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from kvdiag.analyzer.ingest.registry import INGESTERS_BY_KIND
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.domain.records.diagnosis import UnmatchedTemplate

# The format packs of the log ingesters, as `--list` shows them.
PACKS = tuple(p for i in INGESTERS_BY_KIND.values() if (p := getattr(i, "pack_name", None)))


@dataclass
class FileCoverage:
    """One file's line accounting, as `kvdiag formats` reports it."""

    path: str
    kind: str
    lines_total: int = 0
    lines_parsed: int = 0
    lines_unmatched: int = 0
    lines_undecodable: int = 0
    records: int = 0
    notes: list[str] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def coverage(self) -> float | None:
        return self.lines_parsed / self.lines_total if self.lines_total else None


def _coverage(unit: InputUnit, acct: Account, top: int) -> FileCoverage:
    return FileCoverage(
        acct.path,
        unit.kind,
        acct.lines_total,
        acct.lines_parsed,
        acct.lines_unmatched,
        acct.lines_undecodable,
        acct.records,
        list(acct.notes),
        [asdict(t) for t in acct.templates[:top]],
    )


def measure(path: Path, top: int = 10, year: int | None = None) -> list[FileCoverage]:
    """Read a file (or every file of a folder) with the ingester that recognises it."""
    found = discover(path)
    ctx = IngestContext(found.root, year, found.anchor, found.anchor_source)
    out = [FileCoverage(r.path, "unknown", notes=[r.reason]) for r in found.set_aside]
    for unit in found.units:
        for emit in INGESTERS_BY_KIND[unit.kind]().ingest(unit, ctx):
            if isinstance(emit, Account):
                out.append(_coverage(unit, emit, top))
    return sorted(out, key=lambda c: c.path)


def _template_line(t: dict[str, Any]) -> str:
    tpl = UnmatchedTemplate(**t)
    return f"    {tpl.count:>7}  line {tpl.first_line:<7} {tpl.example[:120]}"


def show(cov: FileCoverage) -> None:
    if cov.coverage is None:
        click.echo(f"{cov.path}: {cov.kind}, not read ({'; '.join(cov.notes)})")
        return
    click.echo(
        f"{cov.path}: {cov.kind}, {cov.lines_total} lines, coverage {cov.coverage:.1%} "
        f"({cov.lines_parsed} parsed, {cov.lines_unmatched} unmatched, "
        f"{cov.lines_undecodable} undecodable), {cov.records} records"
    )
    for note in cov.notes:
        click.echo(f"    note: {note}")
    if cov.templates:
        click.echo("  top unmatched shapes (count, first line, example):")
        for t in cov.templates:
            click.echo(_template_line(t))


def list_formats() -> None:
    for name in PACKS:
        pack = load_pack(name)
        click.echo(f"{pack.name}: {pack.description}")
        for step in pack.envelope:
            click.echo(f"  envelope {step.id}: {len(step.samples)} sample(s)")
        for rec in pack.records:
            click.echo(f"  record   {rec.id}: {rec.doc}")
        for event in pack.events:
            variants = ", ".join(v for v, _ in event.variants)
            click.echo(
                f"  event    {event.id} -> {event.table} (variants {variants}; "
                f"{len(event.samples)} sample(s))"
            )
    _list_metric_aliases()


# The family an exposed name belongs to: its prefix (vllm:, sglang:, trtllm_, DCGM_FI_...).
_FAMILY = re.compile(r"^([A-Za-z]+)[:_]")


def _list_metric_aliases() -> None:
    """The metric alias pack: exposed names per family, then each canonical metric's names."""
    table = load_aliases()
    families: dict[str, int] = {}
    for metric in table.metrics:
        for name in metric.names:
            found = _FAMILY.match(name)
            family = found.group(1) if found else name
            families[family] = families.get(family, 0) + 1
    click.echo(
        f"metric_aliases: exposed /metrics names resolved to {len(table.metrics)} canonical "
        "metrics (metric_aliases.toml)"
    )
    for family, count in sorted(families.items()):
        click.echo(f"  family   {family}: {count} name(s)")
    for metric in table.metrics:
        click.echo(f"  metric   {metric.canonical} ({metric.type}) <- {', '.join(metric.names)}")
