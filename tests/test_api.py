"""The Python API (kvdiag/api.py): its records are the commands' own, its documentation runs.

The API and the command line build the same options and call the same entry points, so the
JSON of a record the API returns must be the JSON the command prints, byte for byte; the
worked example of docs/python-api.md must run as written; and `import kvdiag` must stay as
light as `kvdiag --version` needs.
"""

from __future__ import annotations

import functools
import inspect
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kvdiag
from kvdiag import api
from kvdiag.domain.errors import NoInputError
from kvdiag.domain.records.comparison import BeforeAfter, Outcome
from kvdiag.domain.records.diagnosis import Diagnosis, IncidentClass
from kvdiag.domain.records.plan import Plan
from kvdiag.reports import OutputFormat, render
from tests.conftest import FIXTURES, ROOT, run_cli

BEFORE = FIXTURES / "vllm-b-saturation" / "incident"
AFTER = FIXTURES / "vllm-b2-saturation-larger-pool" / "incident"
DOC = ROOT / "docs" / "python-api.md"


@functools.cache
def _analysed(incident: Path) -> Diagnosis:
    """One analysis per incident for the whole module (records are immutable)."""
    return kvdiag.analyze(incident)


@pytest.fixture
def before() -> Diagnosis:
    return _analysed(BEFORE)


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_documented_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ```python block of docs/python-api.md, run from the repository's root."""
    blocks = _python_blocks()
    assert len(blocks) >= 1
    monkeypatch.chdir(ROOT)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name} block {i + 1}", "exec"), {"__name__": "__doc__"})


def test_the_documentation_names_every_function() -> None:
    text = DOC.read_text()
    functions = [n for n in api.__all__ if inspect.isfunction(getattr(api, n))]
    assert {"analyze", "compare", "plan", "redact", "connect"} <= set(functions)
    for name in functions:
        assert f"`{name}(" in text, name


@pytest.mark.parametrize("incident", [BEFORE, AFTER], ids=lambda p: p.parent.name)
def test_analyze_is_the_cli_json(incident: Path) -> None:
    cli = run_cli("analyze", str(incident), "-f", "json", "-q")
    assert cli.exit_code in (0, 1), cli.output
    diagnosis = _analysed(incident)
    assert isinstance(diagnosis, Diagnosis)
    # Nothing in the report varies between runs (no timings, no generated-at time).
    assert render(diagnosis, OutputFormat.JSON) == cli.stdout
    assert kvdiag.render(diagnosis, "json") == cli.stdout


def test_an_example_name_is_the_bundled_incident() -> None:
    assert api._source("example:vllm-b-saturation") == (BEFORE, "vllm-b-saturation")
    assert api._source(str(BEFORE)) == (BEFORE, None)


def test_compare_is_the_cli_json() -> None:
    """With example names, as the README's own `kvdiag compare` command gives them."""
    sides = ("example:vllm-b-saturation", "example:vllm-b2-saturation-larger-pool")
    cli = run_cli("compare", *sides, "-f", "json", "-q")
    assert cli.exit_code == 0, cli.output
    result = kvdiag.compare(*sides)
    assert isinstance(result, BeforeAfter)
    assert result.outcome is Outcome.IMPROVED
    assert result.before.label == sides[0]
    assert kvdiag.render(result, "json") == cli.stdout


def test_plan_is_the_cli_json() -> None:
    cli = run_cli("plan", str(BEFORE), "-f", "json", "-q", "--", "--kv-cache-memory-bytes", "160M")
    assert cli.exit_code == 0, cli.output
    # The flags as one string here, as words on the command line: the same plan.
    result = kvdiag.plan(str(BEFORE), "--kv-cache-memory-bytes 160M")
    assert isinstance(result, Plan)
    assert [s.name for s in result.scenarios] == ["as given"]
    assert kvdiag.render(result, "json") == cli.stdout


@pytest.mark.parametrize("path", ["no/such/incident", "example:no-such-example"])
def test_a_bad_path_raises_no_input_error(path: str, tmp_path: Path) -> None:
    with pytest.raises(NoInputError):
        kvdiag.analyze(path)
    with pytest.raises(kvdiag.NoInputError):
        kvdiag.compare(path, AFTER)


def test_an_empty_folder_raises_no_input_error(tmp_path: Path) -> None:
    with pytest.raises(NoInputError, match="no file in it is a known input"):
        kvdiag.analyze(tmp_path)


@pytest.mark.parametrize(
    "options",
    [
        {"select": "KV999"},
        {"ignore": ["KV301", "no.such_rule"]},
        {"thresholds": {"KV301": 1.0}},
        {"thresholds": {"KV301.no_such_threshold": 1.0}},
    ],
)
def test_what_the_cli_would_refuse_raises_value_error(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        kvdiag.analyze(BEFORE, **options)  # type: ignore[arg-type]


def test_rule_options_reach_the_rules() -> None:
    chosen = kvdiag.analyze(BEFORE, select="KV301,KV302", label="picked")
    assert chosen.incident == "picked"
    assert [r.code for r in chosen.rules] == ["KV301", "KV302"]


def test_series_frames_hold_every_point(before: Diagnosis) -> None:
    frames = kvdiag.series_frames(before)
    assert set(frames) == {s.name for s in before.series}
    for name, frame in frames.items():
        assert frame.columns == ["replica", "time", "value"]
        assert frame.schema["time"] == pl.Datetime("ms")
        assert frame.height == sum(len(s.points) for s in before.series if s.name == name)
    usage = frames["kv_cache_usage"]
    assert usage["value"].max() == max(
        v for s in before.series if s.name == "kv_cache_usage" for _, v in s.points
    )


def test_a_kept_database_is_queried_and_judged_again(tmp_path: Path, before: Diagnosis) -> None:
    db = tmp_path / "incident.duckdb"
    kvdiag.analyze(BEFORE, db=db)
    tables = kvdiag.query(db, "SELECT table_name FROM duckdb_tables()")
    assert "log_stats" in tables["table_name"].to_list()
    one = kvdiag.query(db, "SELECT count(*) AS n FROM log_stats WHERE waiting >= ?", [1])
    assert one["n"][0] > 0
    con = kvdiag.connect(db)
    try:
        assert con.execute("SELECT count(*) FROM log_stats").fetchone()[0] > 0
    finally:
        con.close()
    again = kvdiag.analyze(db)
    assert again.verdict.primary is before.verdict.primary is IncidentClass.SATURATION
    with pytest.raises(NoInputError):
        kvdiag.query(BEFORE / "server.log", "SELECT 1")


def test_redact_writes_a_bundle_and_its_mapping(tmp_path: Path) -> None:
    bundle, mapping = tmp_path / "shareable", tmp_path / "shareable.map.json"
    redaction = kvdiag.redact(BEFORE, bundle, map_path=mapping)
    assert (bundle / "REDACTED.md").is_file() and mapping.is_file()
    assert {f.status for f in redaction.files} <= {"redacted", "copied", "withheld"}
    with pytest.raises(ValueError, match="no category"):
        kvdiag.redact(BEFORE, tmp_path / "other", keep={"no-such-category"})
    with pytest.raises(ValueError, match="not empty"):
        kvdiag.redact(BEFORE, bundle)


def test_render_refuses_what_it_cannot_render(before: Diagnosis) -> None:
    assert kvdiag.render(before, "markdown") == render(before, OutputFormat.MARKDOWN)
    with pytest.raises(ValueError):
        kvdiag.render(before, "pdf")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        kvdiag.render("a diagnosis")  # type: ignore[arg-type]


def test_the_functions_are_not_shadowed_by_their_subpackages() -> None:
    """kvdiag.compare, .plan and .redact stay the functions once the subpackages of the same
    names are imported (Python sets a subpackage as an attribute of its parent)."""
    import kvdiag.compare.sides
    import kvdiag.plan.run
    import kvdiag.redact.run

    assert kvdiag.compare is api.compare
    assert kvdiag.plan is api.plan
    assert kvdiag.redact is api.redact


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_import_kvdiag_loads_neither_polars_nor_the_pipeline() -> None:
    loaded = _fresh(
        "import kvdiag, sys; "
        "print([m for m in ('polars', 'duckdb', 'kvdiag.pipeline', 'kvdiag.api') "
        "if m in sys.modules])"
    )
    assert loaded == "[]"


def test_the_first_call_is_the_function_in_a_fresh_interpreter() -> None:
    """A subpackage imported before the function is first asked for does not shadow it."""
    kinds = _fresh(
        "import kvdiag.compare, kvdiag.plan, kvdiag.redact, kvdiag; "
        "print(type(kvdiag.compare).__name__, type(kvdiag.plan).__name__, "
        "type(kvdiag.redact).__name__, type(kvdiag.analyze).__name__)"
    )
    assert kinds == "function function function function"
