"""The redaction contract: a redacted bundle analyses to the same verdict, classes and key
numbers as the original, and no original value of any category is left in it or in a
report written with --redact.

Checked on every bundled fixture, on every real incident under ../shared/realdata (skipped
where that folder is absent), and on a real run with a value of every category planted
where real incidents carry them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from kvdiag.redact.pseudonyms import Pseudonyms
from kvdiag.redact.run import write_bundle
from tests.conftest import FIXTURES, REALDATA, fixture_cases, run_cli, shared
from tests.goldens import PINNED_MTIME, _pin_mtimes, fixture_diagnosis
from tests.redact_support import analyze_path, as_json, bundle_texts, leaks, signature

CASES = [pytest.param(c.name, id=c.name) for c in fixture_cases()]

# A value of every category, as real incidents carry them (tests/test_redact_contract.py
# plants them into a real run: see _plant).
MODEL = "/home/alice/models/acme-chat-ft-v3"
PLANTED = {
    "secret": [
        "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890",
        "sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
        "s3cr3t-Key-42",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl",
        "hunter22",
    ],
    "host": [
        "gpu-node-7.prod.acme.internal",
        "vllm-acme-7d9f8b6c4-x2k9p",
        "ip-10-20-30-40.ec2.internal",
    ],
    "ip": ["10.20.30.40", "10.1.2.3", "10.1.2.4", "2001:db8:85a3::8a2e:370:7334"],
    "email": ["alice.smith@acme-corp.com", "bob@acme-corp.com"],
    "model": [MODEL, "acme-ml-prod/llama3/finetune-7"],
    "request_id": ["5f1d2c3b4a5e6f708192a3b4c5d6e7f8"],
    "prompt": ["Summarise the Q3 revenue for ACME Corp"],
}
_LAUNCH_EXTRA = f"""\
# launched by alice.smith@acme-corp.com on gpu-node-7.prod.acme.internal
# pod vllm-acme-7d9f8b6c4-x2k9p on node ip-10-20-30-40.ec2.internal
# peer 2001:db8:85a3::8a2e:370:7334
HF_TOKEN=hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890 \
  OPENAI_API_KEY=sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe
vllm serve {MODEL} --api-key s3cr3t-Key-42 --host gpu-node-7.prod.acme.internal
curl -H "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl" http://ops:hunter22@10.20.30.40:8000/metrics
weights copied from s3://acme-ml-prod/llama3/finetune-7
"""


def _plant(dest: Path) -> Path:
    """A copy of a real run (vllm-b-saturation) carrying a value of every category."""
    incident = dest / "acme-prod-incident"
    shutil.copytree(FIXTURES / "vllm-b-saturation" / "incident", incident)
    for path in sorted(p for p in incident.rglob("*") if p.is_file()):
        text = path.read_text().replace("/opt/tinymodel", MODEL)
        if path.name == "server.log":
            text = _plant_clients(text)
        if path.name == "launch.txt":
            text = _LAUNCH_EXTRA + text
        if path.name == "requests.jsonl":
            text = "".join(_plant_request(line) for line in text.splitlines(keepends=True))
        path.write_text(text)
    _pin_mtimes(incident)
    return incident


def _plant_clients(log: str) -> str:
    """The access lines' loopback clients become two private addresses, in turn."""
    clients = iter(["10.1.2.3", "10.1.2.4"] * 1000)
    return re.sub(r"127\.0\.0\.1(?=:\d+ - )", lambda m: next(clients), log)


def _plant_request(line: str) -> str:
    obj = json.loads(line)
    obj["prompt"] = "Summarise the Q3 revenue for ACME Corp"
    obj["request_id"] = "chatcmpl-5f1d2c3b4a5e6f708192a3b4c5d6e7f8"
    obj["user"] = "bob@acme-corp.com"
    return json.dumps(obj) + "\n"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _plant(tmp_path_factory.mktemp("planted"))


def _redacted(source: Path, tmp: Path) -> tuple[Path, Pseudonyms]:
    bundle = tmp / "bundle.tar.gz"
    names = Pseudonyms()
    write_bundle(source, bundle, names=names)
    return bundle, names


@pytest.mark.parametrize("name", CASES)
def test_every_fixture_redacts_to_the_same_analysis(name: str, tmp_path: Path) -> None:
    (case,) = [c for c in fixture_cases() if c.name == name]
    original = as_json(fixture_diagnosis(name))
    bundle, names = _redacted(case.incident, tmp_path)
    assert signature(as_json(analyze_path(bundle))) == signature(original)
    assert leaks(bundle_texts(bundle), names) == []


def test_planted_values_are_all_replaced_and_the_analysis_holds(
    planted: Path, tmp_path: Path
) -> None:
    bundle, names = _redacted(planted, tmp_path)
    texts = bundle_texts(bundle)
    everything = "\n".join([*texts.values(), *texts])
    for category, values in PLANTED.items():
        for value in values:
            assert value not in everything, (category, value)
    assert leaks(texts, names) == []
    found = names.originals()
    for category in PLANTED:
        assert found.get(category), f"nothing replaced as {category}"
    assert signature(as_json(analyze_path(bundle))) == signature(as_json(analyze_path(planted)))
    # the run itself: what a reader needs to follow it is still there
    assert "--kv-cache-memory-bytes 17M" in texts["launch.txt"]
    assert 'POST /v1/completions HTTP/1.1" 200 OK' in texts["server.log"]


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_reports_written_with_redact_carry_no_original(
    planted: Path, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / f"report.{fmt}"
    result = run_cli("analyze", str(planted), "--redact", "-f", fmt, "-o", str(out), "-q")
    assert result.exit_code in (0, 1), result.output
    report = out.read_text()
    for category, values in PLANTED.items():
        for value in values:
            assert value not in report, (category, value)
    assert "acme-prod-incident" not in report  # a folder name cannot be vouched for
    mapping = json.loads((tmp_path / f"report.{fmt}.map.json").read_text())
    assert MODEL in mapping["categories"]["model"].values()
    assert "saturation" in report


def test_compare_with_redact_uses_one_table_for_both_sides(planted: Path, tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    result = run_cli(
        "compare", str(planted), str(planted), "--redact", "-f", "json", "-o", str(out), "-q"
    )
    assert result.exit_code in (0, 1), result.output
    report = out.read_text()
    for values in PLANTED.values():
        for value in values:
            assert value not in report
    assert json.loads(report)["outcome"] == "unchanged"


def _recorded_runs() -> list[str]:
    folder = REALDATA / "vllm-cpu"
    if not folder.is_dir():
        return ["(absent)"]
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "tools")


@pytest.mark.parametrize("run", _recorded_runs())
def test_real_recordings_redact_to_the_same_analysis(run: str, tmp_path: Path) -> None:
    source = tmp_path / run
    shutil.copytree(shared("realdata", "vllm-cpu", run), source)
    _pin_mtimes(source)
    bundle, names = _redacted(source, tmp_path)
    assert signature(as_json(analyze_path(bundle))) == signature(as_json(analyze_path(source)))
    assert leaks(bundle_texts(bundle), names) == []


def _issue_fragments() -> list[str]:
    folder = REALDATA / "issues"
    if not folder.is_dir():
        return ["(absent)"]
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != "INDEX.md")


@pytest.mark.parametrize("fragment", _issue_fragments())
def test_pasted_fragments_redact_to_the_same_analysis(fragment: str, tmp_path: Path) -> None:
    source = tmp_path / fragment
    shutil.copy(shared("realdata", "issues", fragment), source)
    os.utime(source, (PINNED_MTIME, PINNED_MTIME))
    bundle, names = _redacted(source, tmp_path)
    assert signature(as_json(analyze_path(bundle))) == signature(as_json(analyze_path(source)))
    assert leaks(bundle_texts(bundle), names) == []
