"""Data flows one way: the import graph enforces the layers.

The floors, from the ground up (a module may import its own floor and the ones below):

    ground     domain/ (the arithmetic and the records every layer hands on), _allocator.py
    reading    analyzer/: schema/ and text/, then ingest/, discovery/ and live/; store/
               (which knows nothing of ingest); the incident model (model/) on top
    judgement  rules/: the rules, what only rules use (support/), the engine (engine/)
    pipeline   pipeline.py: one analysis, from discovery to the diagnosis
    commands   compare/, plan/, redact/: built on a diagnosis and its incident model
    rendering  reports/: renderers of records, and of nothing else
    faces      cli/ (the command line), api.py (the Python API), __main__.py, __init__.py
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "kvdiag"

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("domain", "_allocator")),
    ("reading", ("analyzer",)),
    ("judgement", ("rules",)),
    ("pipeline", ("pipeline",)),
    ("commands", ("compare", "plan", "redact")),
    ("rendering", ("reports",)),
    ("faces", ("cli", "api", "__main__", "__init__")),
)

# Within a floor: folder -> module prefixes it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # the store's vocabulary and the line reading: below everything else that reads
    "analyzer/schema": (
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.discovery",
        "kvdiag.analyzer.store",
        "kvdiag.analyzer.model",
        "kvdiag.analyzer.live",
    ),
    "analyzer/text": (
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.discovery",
        "kvdiag.analyzer.store",
        "kvdiag.analyzer.model",
        "kvdiag.analyzer.live",
    ),
    "analyzer/ingest": (
        "kvdiag.analyzer.discovery",
        "kvdiag.analyzer.store",
        "kvdiag.analyzer.model",
        "kvdiag.analyzer.live",
        "duckdb",
    ),
    # the store knows nothing of ingest: it writes what it is given
    "analyzer/store": (
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.discovery",
        "kvdiag.analyzer.model",
        "kvdiag.analyzer.live",
    ),
    # the incident model reads the store, never the files
    "analyzer/model": (
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.discovery",
        "kvdiag.analyzer.live",
    ),
    # the commands read the incident model, never the store or the files
    "compare": (
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.store",
        "kvdiag.analyzer.discovery",
        "kvdiag.rules",
        "kvdiag.plan",
        "duckdb",
    ),
    "plan": (
        "kvdiag.analyzer.ingest",
        "kvdiag.analyzer.store",
        "kvdiag.analyzer.discovery",
        "kvdiag.rules",
        "kvdiag.compare",
        "duckdb",
    ),
    "redact": ("kvdiag.analyzer.store", "kvdiag.rules", "kvdiag.compare", "kvdiag.plan"),
    # a record is rendered from the record alone
    "reports": (
        "kvdiag.analyzer",
        "kvdiag.rules",
        "kvdiag.pipeline",
        "kvdiag.compare",
        "kvdiag.plan",
        "kvdiag.redact",
        "duckdb",
    ),
}


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """The modules a file imports (relative imports resolved), `from kvdiag import x` as
    kvdiag.x where x is a module; under TYPE_CHECKING too (a type is a dependency)."""
    tree = ast.parse(path.read_text())
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    nodes = tree.body if top_level_only else ast.walk(tree)
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}")}
    return names


def _is_module(name: str) -> bool:
    path = PKG.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _floor(module: str) -> int | None:
    """The floor of a kvdiag module; None for the bare package (its `__version__`)."""
    parts = module.split(".")
    if parts == ["kvdiag"]:
        return None
    for i, (_, rooms) in enumerate(FLOORS):
        if parts[1] in rooms:
            return i
    raise AssertionError(f"{module}: on no floor (add it to FLOORS)")


def _sources() -> Iterator[Path]:
    yield from sorted(PKG.rglob("*.py"))


def test_every_module_stands_on_a_floor() -> None:
    for path in _sources():
        module = _module(path)
        if module != "kvdiag":
            assert _floor(module) is not None, module


def test_no_module_imports_a_floor_above_its_own() -> None:
    bad = []
    for path in _sources():
        mine = _floor(_module(path)) if _module(path) != "kvdiag" else len(FLOORS) - 1
        assert mine is not None
        for name in sorted(_imports(path)):
            if not _under(name, "kvdiag") or name == "kvdiag":
                continue
            theirs = _floor(name)
            if theirs is not None and theirs > mine:
                bad.append(
                    f"{path.relative_to(PKG)} ({FLOORS[mine][0]}) imports {name} "
                    f"({FLOORS[theirs][0]})"
                )
    assert not bad, "\n".join(bad)


def test_only_the_version_is_taken_from_the_package_root() -> None:
    bad = [
        f"{path.relative_to(PKG)}:{node.lineno}"
        for path in _sources()
        if path.parent != PKG
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module == "kvdiag"
        and {a.name for a in node.names} - {"__version__"}
    ]
    assert not bad, bad


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layer_does_not_import_what_it_must_not(folder: str) -> None:
    bad = []
    for path in sorted((PKG / folder).rglob("*.py")):
        for name in sorted(_imports(path)):
            if any(_under(name, p) for p in FORBIDDEN[folder]):
                bad.append(f"{path.relative_to(PKG)} imports {name}")
    assert not bad, bad


@pytest.mark.parametrize("folder", ["compare", "plan", "redact", "reports", "cli"])
def test_commands_ask_the_incident_model_for_quantities_not_queries(folder: str) -> None:
    """The commands, renderers and faces name the quantities they need (Incident's methods,
    kvdiag/analyzer/model/incident.py); a query of the store is the model's to write."""
    asked = [
        f"{path.relative_to(PKG)}:{node.lineno}"
        for path in sorted((PKG / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in {"sql", "scalar", "memo"}
    ]
    assert not asked, asked


def test_no_import_cycle_between_modules() -> None:
    """Module-level imports (the ones run at import time) form no cycle."""
    graph = {
        _module(p): {n for n in _imports(p, top_level_only=True) if _is_module(n)}
        for p in _sources()
    }
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for name in sorted(graph.get(module, ())):
            if name != module and not module.startswith(name + "."):  # a package's own
                cycle = visit(name, [*path, module])
                if cycle:
                    return cycle
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module, [])
        assert cycle is None, " -> ".join(cycle)


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
