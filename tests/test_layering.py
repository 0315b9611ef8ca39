"""Data flows one way: the import graph enforces the layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "kvdiag"

# package folder -> module prefixes it must not import
FORBIDDEN = {
    "rules": (
        "kvdiag.cli",
        "kvdiag.pipeline",
        "kvdiag.analyzer.ingest",
        "kvdiag.reports",
    ),
    "reports": (
        "kvdiag.cli",
        "kvdiag.pipeline",
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.store",
        "kvdiag.rules",
        "duckdb",
        # a comparison is rendered from its record alone, as a diagnosis is
        "kvdiag.compare.judge",
        "kvdiag.analyzer.model.profile",
        "kvdiag.compare.outcome",
        "kvdiag.compare.remedies",
        "kvdiag.analyzer.model.stated",
        "kvdiag.compare.sides",
        # a plan is rendered from its record alone
        "kvdiag.plan.run",
        "kvdiag.plan.sim",
        "kvdiag.analyzer.model.traffic",
        "kvdiag.plan.steptime",
        "kvdiag.plan.engine",
        "kvdiag.plan.sweep",
        "kvdiag.plan.knee",
    ),
    # judgement over two analyses: never the command line
    "compare": ("kvdiag.cli",),
    # the simulator and the planner: never the command line or a renderer
    "plan": ("kvdiag.cli", "kvdiag.reports"),
    # The domain's arithmetic is the bottom layer: pure functions everyone calls.
    "domain": (
        "kvdiag.analyzer",
        "kvdiag.rules",
        "kvdiag.reports",
        "duckdb",
    ),
    "analyzer/ingest": (
        "kvdiag.analyzer.store",
        "kvdiag.rules.engine",
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


# store/errors.py names DuckDB's exception types for the store, and opens no connection;
# store/kept.py opens a kept database read-only.
_STORE = (
    "analyzer/store/database.py",
    "analyzer/store/errors.py",
    "analyzer/store/memory.py",  # the store's memory limit (SET memory_limit)
    "analyzer/store/kept.py",  # opens a kept database read-only
    "analyzer/store/arrow_stream.py",  # the store's frames to and from DuckDB, no connection
)


def test_only_the_store_writes_duckdb() -> None:
    writers = [
        p.relative_to(PKG).as_posix()
        for p in PKG.rglob("*.py")
        if "duckdb" in _imports(p) and p.relative_to(PKG).as_posix() not in _STORE
    ]
    assert writers == [], writers
    assert "connect(" not in (PKG / "analyzer" / "store" / "errors.py").read_text()


# One home per domain quantity (kvdiag/domain): a second copy must not grow back elsewhere.
_DTYPE_NAMES = {"bfloat16", "float16", "half", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "int8"}
_DOMAIN_FUNCTIONS = {
    "dtype_bytes",
    "element_bytes",
    "bytes_per_token",
    "kv_bytes_per_token",
    "mla_bytes_per_token",
    "pool_tokens_from_bytes",
    "counter_increase",
    "counter_deltas",
    "counter_totals",
    "bucket_quantile",
    "bucket_quantiles",
    "histogram_quantiles",
    "_quantile",
}


def _outside_domain() -> list[Path]:
    return [p for p in sorted(PKG.rglob("*.py")) if "domain" not in p.relative_to(PKG).parts]


def _literal_keys(node: ast.AST) -> set[str]:
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return {k.value for k in items if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def test_no_dtype_table_outside_the_domain() -> None:
    tables = [
        f"{p.relative_to(PKG)}:{node.lineno}"
        for p in _outside_domain()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Dict | ast.Set | ast.Tuple | ast.List)
        and len(_literal_keys(node) & _DTYPE_NAMES) >= 2
    ]
    assert tables == [], f"dtype sizes live in kvdiag/domain/dtypes.py: {tables}"


def test_no_domain_arithmetic_defined_outside_the_domain() -> None:
    copies = [
        f"{p.relative_to(PKG)}:{node.lineno} {node.name}"
        for p in _outside_domain()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name in _DOMAIN_FUNCTIONS
    ]
    assert copies == [], f"call kvdiag/domain instead of defining: {copies}"
