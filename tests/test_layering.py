"""Data flows one way: the import graph enforces the layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "kvdiag"

# package folder -> module prefixes it must not import
FORBIDDEN = {
    "rules": (
        "kvdiag.analyzer.cli",
        "kvdiag.analyzer.pipeline",
        "kvdiag.analyzer.ingest",
        "kvdiag.reports",
    ),
    "reports": (
        "kvdiag.analyzer.cli",
        "kvdiag.analyzer.pipeline",
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.store",
        "kvdiag.rules",
        "duckdb",
    ),
    # The domain's arithmetic is the bottom layer: pure functions everyone calls.
    "domain": (
        "kvdiag.analyzer",
        "kvdiag.rules",
        "kvdiag.reports",
        "duckdb",
    ),
    "analyzer/ingest": (
        "kvdiag.analyzer.store",
        "kvdiag.analyzer.verdict",
        "kvdiag.rules",
        "kvdiag.reports",
        "duckdb",
    ),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layer_does_not_import_upward(folder: str) -> None:
    bad = []
    for path in sorted((PKG / folder).rglob("*.py")):
        for name in _imports(path):
            if name.startswith(FORBIDDEN[folder]):
                bad.append(f"{path.relative_to(PKG)} imports {name}")
    assert not bad, bad


# store/errors.py names DuckDB's exception types for the store, and opens no connection.
_STORE = ("analyzer/store/database.py", "analyzer/store/errors.py")


def test_only_the_store_writes_duckdb() -> None:
    writers = [
        p.relative_to(PKG).as_posix()
        for p in PKG.rglob("*.py")
        if "duckdb" in _imports(p) and p.relative_to(PKG).as_posix() not in _STORE
    ]
    assert writers == [], writers
    assert "connect(" not in (PKG / "analyzer" / "store" / "errors.py").read_text()
