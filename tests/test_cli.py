"""The CLI contract: exit codes, the JSON shape, streams, files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from kvdiag.domain.exitcodes import ExitCode
from kvdiag.domain.records.diagnosis import Severity
from kvdiag.rules.base import Rule, RuleContext
from kvdiag.rules.engine import rule_runner
from tests.conftest import FIXTURES, analyze_json, run_cli

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"
HEALTHY = FIXTURES / "vllm-a-healthy" / "incident"


def test_help_lists_exit_codes_and_examples() -> None:
    out = run_cli("analyze", "--help").stdout
    for code in ExitCode:
        assert f"  {int(code)}  " in out
    assert "--example" in out
    assert "vllm-b-saturation" in out
    assert run_cli("--help").exit_code == 0


def test_saturation_json_contract() -> None:
    code, doc = analyze_json(SATURATION)
    assert code == ExitCode.FINDINGS
    assert {
        "schema_version",
        "kvdiag_version",
        "verdict",
        "findings",
        "facts",
        "inputs",
        "missing_evidence",
    } <= set(doc)
    verdict = doc["verdict"]
    assert verdict["primary"] == "saturation"
    assert verdict["confidence"] in ("high", "medium", "low")
    assert any(ch.isdigit() for ch in verdict["summary"])
    finding = doc["findings"][0]
    assert {"code", "name", "layer", "severity", "title", "evidence", "remediation"} <= set(finding)
    for ev in finding["evidence"]:
        assert {"path", "line", "ts", "what", "value", "excerpt"} <= set(ev)
    for name in ("pool_tokens", "block_size", "pool_blocks", "max_model_len"):
        assert {"value", "unit", "source"} <= set(doc["facts"][name]), name
    assert doc["facts"]["pool_tokens"]["value"] == 8704
    for record in doc["inputs"]:
        assert {"path", "kind", "lines_total", "lines_parsed", "lines_unmatched"} <= set(record)


def test_evidence_points_at_real_lines() -> None:
    _, doc = analyze_json(SATURATION)
    for finding in doc["findings"]:
        for ev in finding["evidence"]:
            # Lines end at \n only (a bare \r from a progress bar stays inside its line).
            lines = (SATURATION / ev["path"]).read_bytes().split(b"\n")
            line = lines[ev["line"] - 1].decode("utf-8", "replace").replace("\r", "")
            assert line.strip().startswith(ev["excerpt"].rstrip("…").strip()), (ev, line)


def test_fail_on_never_exits_zero_and_healthy_exits_zero() -> None:
    assert run_cli("analyze", str(SATURATION), "-q", "--fail-on", "never").exit_code == ExitCode.OK
    assert run_cli("analyze", str(HEALTHY), "-q").exit_code == ExitCode.OK


@pytest.mark.parametrize(
    "args",
    [
        [],
        [str(SATURATION), "--example", "vllm-b-saturation"],
        [str(SATURATION), "--set", "KV301.usage_full"],
        [str(SATURATION), "--format", "pdf"],
    ],
    ids=["nothing", "both-sources", "bad-threshold", "bad-format"],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert run_cli("analyze", *args).exit_code == ExitCode.USAGE


def test_missing_or_empty_input_exits_3(tmp_path: Path) -> None:
    assert run_cli("analyze", str(tmp_path / "nope")).exit_code == ExitCode.NO_INPUT
    assert run_cli("analyze", str(tmp_path)).exit_code == ExitCode.NO_INPUT
    (tmp_path / "notes.txt").write_text("restarted the pod at 3am\n")
    result = run_cli("analyze", str(tmp_path))
    assert result.exit_code == ExitCode.NO_INPUT
    assert "no file in it is a known input" in result.stderr


class _Boom(Rule):
    """Raises, to prove a broken rule cannot take the analysis down."""

    code = "KV999"
    name = "test.boom"
    layer = None
    severity = Severity.ERROR

    def check(self, ctx: RuleContext):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")


def test_a_crashing_rule_is_listed_and_exits_4(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvdiag import rules

    monkeypatch.setattr(rule_runner, "RULES", (*rules.RULES, _Boom))
    result = run_cli("analyze", str(SATURATION), "--format", "json", "-q")
    assert result.exit_code == ExitCode.INTERNAL
    doc = json.loads(result.stdout)
    assert doc["verdict"]["primary"] == "saturation"
    crashed = [r for r in doc["rules"] if r["status"] == "crashed"]
    assert [r["code"] for r in crashed] == ["KV999"]
    assert "boom" in crashed[0]["reason"]


def test_output_file_and_database(tmp_path: Path) -> None:
    out, db = tmp_path / "report.json", tmp_path / "incident.duckdb"
    result = run_cli("analyze", str(SATURATION), "-f", "json", "-o", str(out), "--db", str(db))
    assert result.exit_code == ExitCode.FINDINGS
    assert result.stdout == ""
    assert json.loads(out.read_text())["verdict"]["primary"] == "saturation"
    assert not list(tmp_path.glob("*.partial"))
    con = duckdb.connect(str(db), read_only=True)
    stats = con.sql("SELECT count(*) FROM log_stats").fetchall()[0][0]
    assert stats == 17  # the 17 stats lines of server.log (NOTES.md: n_stats_lines 17)


def test_text_report_has_no_colour_when_piped() -> None:
    out = run_cli("analyze", str(SATURATION)).stdout
    assert "\x1b[" not in out
    assert "VERDICT  saturation" in out
    assert "server.log:167" in out


def test_rules_and_tables_commands_describe_themselves() -> None:
    out = run_cli("rules").stdout
    assert "KV301" in out and "usage_full" in out
    assert "KV301" in {r["code"] for r in json.loads(run_cli("rules", "-f", "json").stdout)}
    assert "log_stats" in run_cli("tables").stdout
    assert "vllm-b-saturation" in run_cli("examples").stdout


def test_bundled_examples_run_from_a_source_checkout() -> None:
    """An editable install finds the examples in fixtures/ (the wheel ships them inside)."""
    result = run_cli("analyze", "--example", "vllm-b-saturation", "-f", "json", "-q")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["verdict"]["primary"] == "saturation"
    pair = run_cli(
        "compare", "example:vllm-b-saturation", "example:vllm-b2-saturation-larger-pool", "-q"
    )
    assert pair.exit_code == 0 and "improved" in pair.stdout


@pytest.mark.parametrize(
    "args",
    [("--version",), ("--help",), ("analyze", "--help"), ("compare", "--help"), ("plan", "--help")],
)
def test_version_and_help_load_neither_polars_nor_duckdb(args: tuple[str, ...]) -> None:
    """What a first command costs is mostly imports: printing the version or the help must
    not load the analysis' libraries (a fresh interpreter, so nothing is loaded already)."""
    code = (
        "import sys; from kvdiag.cli.main import main\n"
        f"try:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('polars', 'duckdb', 'jinja2', 'pyarrow') if m in sys.modules]\n"
        "print('LOADED', heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "LOADED []" in done.stdout, done.stdout[-300:]
