"""Numbers that cannot be true: found once, after ingestion, before facts and rules.

Every numeric column of every table with provenance has a plausible range, declared as
data: plausible.toml for store columns and configuration values, the alias table's unit
ranges for metric samples. A row holding a value outside its range, NaN or an infinity is
reported as an input problem (file and line) and handed to the store, which moves it out
of its table into `implausible_values`; facts, rules and charts never see it. The time
checks that need the cleaned store live in timeline.py.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import polars as pl

from kvdiag.analyzer.schema import TABLES, TABLES_BY_NAME, Column
from kvdiag.analyzer.schema.aliases import load_aliases
from kvdiag.analyzer.schema.fieldtypes import INT64_SATURATED
from kvdiag.analyzer.store.database import INT32_LIMIT, StoreReader
from kvdiag.domain.errors import FormatPackError
from kvdiag.domain.records.diagnosis import Doubt, InputProblem

NUMERIC_TYPES = ("DOUBLE", "BIGINT", "INTEGER")
PER_METRIC = "metric_aliases"
_PROVENANCE = {"source_path", "source_line", "raw"}
_SET_ASIDE = "implausible_values"  # where flagged rows go: not checked again
# The columns of the frame `implausible_rows` returns (and Store.set_aside takes).
FLAGGED = {
    "table_name": pl.String,
    "row_id": pl.Int64,
    "column_name": pl.String,
    "value": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "source_path": pl.String,
    "source_line": pl.Int64,
    "raw": pl.String,
}
Range = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Plausible:
    """The declared ranges: per table column, per configuration key, and the default."""

    default: dict[str, Range]  # per column type
    columns: dict[str, dict[str, Range | str]]
    config_values: dict[str, Range]

    def column_range(self, table: str, column: Column) -> Range | str:
        return self.columns.get(table, {}).get(column.name, self.default[column.type])


def _range(value: Any, where: str) -> Range:
    ok = isinstance(value, list) and len(value) == 2
    if not ok or not all(isinstance(v, int | float) for v in value) or value[0] > value[1]:
        raise FormatPackError(f"{where}: must be [low, high] with low <= high, got {value!r}")
    return float(value[0]), float(value[1])


def parse_plausible(text: str, where: str) -> Plausible:
    """Parse and check plausible.toml: every listed column must be a declared numeric one."""
    raw = tomllib.loads(text)
    if raw.get("schema") != 1:
        raise FormatPackError(f"{where}: unsupported schema {raw.get('schema')!r}")
    if unknown := set(raw) - {"schema", "default", "columns", "config_values"}:
        raise FormatPackError(f"{where}: unknown key(s) {sorted(unknown)}")
    columns: dict[str, dict[str, Range | str]] = {}
    for name, spec in raw.get("columns", {}).items():
        types = (
            {c.name: c.type for c in TABLES_BY_NAME[name].columns} if name in TABLES_BY_NAME else {}
        )
        for column, value in spec.items():
            if types.get(column) not in NUMERIC_TYPES:
                raise FormatPackError(f"{where}: {name}.{column} is not a numeric column")
            per_metric = value == PER_METRIC and (name, column) == ("metric_samples", "value")
            checked = PER_METRIC if per_metric else _range(value, f"{where}: {name}.{column}")
            columns.setdefault(name, {})[column] = checked
    config = {k: _range(v, f"{where}: config_values.{k}") for k, v in raw["config_values"].items()}
    default = {t: _range(raw["default"].get(t), f"{where}: default.{t}") for t in NUMERIC_TYPES}
    return Plausible(default, columns, config)


@cache
def load_plausible() -> Plausible:
    """The bundled ranges."""
    text = (resources.files("kvdiag.analyzer.store") / "plausible.toml").read_text(encoding="utf-8")
    return parse_plausible(text, "plausible.toml")


def _num(x: float) -> str:
    """A bound or value as SQL: DuckDB reads 'inf'/'-inf' only as a cast."""
    return f"'{x}'::DOUBLE" if math.isinf(x) else repr(x)


def _column_query(table: str, column: str, bounds: Range) -> str:
    low, high = bounds
    value = f'CAST("{column}" AS DOUBLE)'
    return (
        f"SELECT '{table}' AS table_name, {TABLES_BY_NAME[table].row_id} AS row_id, "
        f"'{column}' AS column_name, "
        f"{value} AS value, {_num(low)} AS low, {_num(high)} AS high, "
        f'source_path, source_line, raw FROM "{table}" '
        f"WHERE {value} IS NOT NULL AND (isnan({value}) OR NOT ({value} BETWEEN "
        f"{_num(low)} AND {_num(high)}))"
    )


def _metric_query() -> tuple[str, list[Any]]:
    """Samples outside their metric's range; bucket, count and created values only >= 0."""
    metrics = load_aliases().metrics
    rows = ", ".join("(?, ?, ?)" for _ in metrics)
    params: list[Any] = [x for m in metrics for x in (m.canonical, *m.range)]
    return (
        f"WITH r(metric, low, high) AS (VALUES {rows}) "
        "SELECT 'metric_samples' AS table_name, m.sample_row AS row_id, m.metric AS column_name, "
        "m.value, CASE WHEN m.suffix IN ('', 'total', 'sum') THEN r.low ELSE 0 END AS low, "
        "CASE WHEN m.suffix IN ('', 'total', 'sum') THEN r.high ELSE 'inf'::DOUBLE END "
        "AS high, m.source_path, m.source_line, m.raw "
        "FROM metric_samples m JOIN r USING (metric) WHERE m.value IS NOT NULL AND "
        "(NOT isfinite(m.value) OR m.value < low OR m.value > high)",
        params,
    )


def _config_query(config: dict[str, Range]) -> tuple[str, list[Any]]:
    rows = ", ".join("(?, ?, ?)" for _ in config)
    params: list[Any] = [x for key, (low, high) in config.items() for x in (key, low, high)]
    value = "TRY_CAST(c.value AS DOUBLE)"
    return (
        f"WITH r(key, low, high) AS (VALUES {rows}) "
        "SELECT 'config' AS table_name, c.rowid AS row_id, c.key AS column_name, "
        f"{value} AS value, r.low, r.high, c.source_path, c.source_line, c.raw "
        f"FROM config c JOIN r USING (key) WHERE {value} IS NOT NULL AND "
        f"(isnan({value}) OR {value} < r.low OR {value} > r.high)",
        params,
    )


def _nonempty(reader: StoreReader) -> list[str]:
    names = [
        t.name
        for t in TABLES
        if set(t.column_names) >= _PROVENANCE and t.name != _SET_ASIDE and t.part_of is None
    ]
    # The store knows which tables rows went into (StoreReader.has_rows): no count query.
    return [n for n in names if reader.has_rows(n)]


def implausible_rows(reader: StoreReader) -> pl.DataFrame:
    """Every value outside its plausible range, one row per (row, column): see FLAGGED."""
    plausible = load_plausible()
    nonempty = _nonempty(reader)
    checks = _column_checks(nonempty, plausible)
    ranged = [(t, c, b) for t, c, b in checks if isinstance(b, tuple)]
    queries: list[tuple[str, list[Any]]] = [
        (_column_query(*check), []) for check in _out_of_range(reader, ranged)
    ]
    if any(b == PER_METRIC for _, _, b in checks):
        queries.append(_metric_query())
    if "config" in nonempty:
        queries.append(_config_query(plausible.config_values))
    if not queries:
        return pl.DataFrame(schema=FLAGGED)
    union = " UNION ALL ".join(f"SELECT * FROM ({q})" for q, _ in queries)
    params = [x for _, p in queries for x in p]
    return reader.sql(union, params).cast(FLAGGED)  # type: ignore[arg-type]


def _column_checks(names: list[str], plausible: Plausible) -> list[tuple[str, str, Range | str]]:
    """(table, column, range or PER_METRIC) of every numeric column of these tables."""
    checks: list[tuple[str, str, Range | str]] = []
    for name in names:
        declared = TABLES_BY_NAME[name]
        for column in declared.columns:
            # A view's row id (metric_samples.sample_row) is the store's, not the input's.
            if column.type not in NUMERIC_TYPES or column.name == declared.row_id:
                continue
            checks.append((name, column.name, plausible.column_range(name, column)))
    return checks


def _out_of_range(
    reader: StoreReader, checks: list[tuple[str, str, Range]]
) -> list[tuple[str, str, Range]]:
    """The checks whose column holds a value out of range, from each column's min and max
    read in one statement (NaN sorts above everything in DuckDB, so its max is NaN): the
    row-by-row queries run only for those. A query per check, or their union, read every
    checked column row by row in every analysis, however small its input.
    """
    if not checks:
        return []
    tables: dict[str, list[str]] = {}
    for i, (table, column, _) in enumerate(checks):
        value = f'CAST("{column}" AS DOUBLE)'
        tables.setdefault(table, []).append(f"min({value}) AS lo{i}, max({value}) AS hi{i}")
    parts = [f'(SELECT {", ".join(cols)} FROM "{table}")' for table, cols in tables.items()]
    seen = reader.sql("SELECT * FROM " + " CROSS JOIN ".join(parts)).row(0, named=True)
    return [c for i, c in enumerate(checks) if not _within(seen[f"lo{i}"], seen[f"hi{i}"], c[2])]


def _within(low: float | None, high: float | None, bounds: Range) -> bool:
    """Whether a column's min and max lie in its range (None: no value; NaN never does)."""
    if low is None or high is None:
        return True
    return bounds[0] <= low <= high <= bounds[1]


def shown(value: float) -> str:
    """A value as the problem states it."""
    if math.isnan(value):
        return "NaN"
    if abs(value) == INT64_SATURATED:  # an integer field fieldtypes.py could not hold
        return "a number too long for 64 bits"
    if abs(value) == INT32_LIMIT:  # a value the store could not fit in an INTEGER column
        return "a number too long for 32 bits"
    return f"{value:,.0f}" if value.is_integer() and abs(value) < 1e18 else f"{value:g}"


def why(value: float, low: float, high: float) -> str:
    """Why a value is implausible, in words."""
    if math.isnan(value):
        return "not a number"
    if math.isinf(value):
        return "infinite"
    return f"below {shown(low)}" if value < low else f"above {shown(high)}"


def _what(table: str, column: str) -> str:
    # Metric samples name their canonical metric; config rows their key.
    return column if table in ("metric_samples", "config") else f"{table}.{column}"


def range_problems(flagged: pl.DataFrame) -> tuple[tuple[InputProblem, ...], tuple[Doubt, ...]]:
    """One problem per (table, column, reason), at its first row; a doubt on each file."""
    if flagged.is_empty():
        return (), ()
    rows = flagged.with_columns(
        pl.struct("value", "low", "high")
        .map_elements(lambda r: why(r["value"], r["low"], r["high"]), return_dtype=pl.String)
        .alias("reason")
    ).sort("source_path", "source_line", "table_name", "column_name")
    problems = []
    for (table, column, reason), group in rows.group_by(
        "table_name", "column_name", "reason", maintain_order=True
    ):
        first = group.row(0, named=True)
        files = group["source_path"].n_unique()
        more = (
            f"; {group.height:,} values like it in {files:,} file{'s' if files > 1 else ''}"
            if group.height > 1
            else ""
        )
        problems.append(
            InputProblem(
                first["source_path"],
                first["source_line"],
                f"{_what(str(table), str(column))} = {shown(first['value'])} is implausible "
                f"({reason}){more}; set aside: facts and rules do not use it",
            )
        )
    paths = frozenset(rows["source_path"].unique().to_list())
    doubt = Doubt("values in the same file were implausible and set aside", paths)
    return tuple(problems), (doubt,)
