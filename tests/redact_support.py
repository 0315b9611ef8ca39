"""Shared by the redaction tests: what an analysis must keep, and where originals may hide."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from kvdiag.domain.records.diagnosis import Diagnosis
from kvdiag.domain.records.options import AnalyzeOptions
from kvdiag.pipeline import analyze
from kvdiag.redact.pseudonyms import Pseudonyms, learnable
from kvdiag.reports import OutputFormat, render


def as_json(diagnosis: Diagnosis) -> dict[str, Any]:
    return json.loads(render(diagnosis, OutputFormat.JSON))


def analyze_path(path: Path, label: str = "incident") -> Diagnosis:
    return analyze(AnalyzeOptions(incident=path, label=label)).diagnosis


def _numbers(facts: dict[str, Any]) -> dict[str, Any]:
    """Facts whose values are numbers (the pool, the peaks, the settings' values); a fact
    held per GPU or per replica gives its sorted values (a replica's name is pseudonymised)."""
    out = {}
    for name, fact in facts.items():
        values = [f["value"] for f in (fact if isinstance(fact, list) else [fact])]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[name] = sorted(values)
    return out


def signature(diagnosis: dict[str, Any]) -> dict[str, Any]:
    """What a redacted copy must analyse to, exactly as the original did."""
    v = diagnosis["verdict"]
    return {
        "primary": v["primary"],
        "classes": v["classes"],
        "confidence": v["confidence"],
        "codes": sorted(f["code"] for f in diagnosis["findings"]),
        "facts": _numbers(diagnosis["facts"]),
        "layers": [(r["layer"], r["status"]) for r in diagnosis["reconciliation"]],
        "window": diagnosis["window"],
        "replicas": len(diagnosis["fleet"]),
    }


def originals(names: Pseudonyms) -> list[tuple[str, str]]:
    """(category, original) of every value that must appear nowhere in the bundle.

    A plain short word found in one context (`host=worker`) is replaced there only: it may
    be a word of the logs themselves elsewhere, so it is not looked for."""
    out = []
    for category, table in names.originals().items():
        for original in table.values():
            if learnable(original) or category in ("ip", "email", "secret", "request_id"):
                out.append((category, original))
    return out


def bundle_texts(bundle: Path) -> dict[str, str]:
    """name -> text of every file in a bundle (a folder or a tar)."""
    if bundle.is_dir():
        return {
            p.relative_to(bundle).as_posix(): p.read_text("utf-8", "surrogateescape")
            for p in sorted(bundle.rglob("*"))
            if p.is_file()
        }
    with tarfile.open(bundle) as tf:
        out = {}
        for m in tf.getmembers():
            fh = tf.extractfile(m)
            if fh is not None:
                out[m.name] = fh.read().decode("utf-8", "surrogateescape")
        return out


def leaks(texts: dict[str, str], names: Pseudonyms) -> list[str]:
    """`file: category original` for every original value still present."""
    found = []
    for category, original in originals(names):
        for name, text in texts.items():
            if original in text or original in name:
                found.append(f"{name}: {category} {original!r}")
    return found
