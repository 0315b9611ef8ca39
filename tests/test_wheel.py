"""The example runs from an installed wheel, not only from the source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
    )
    (wheel,) = dist.glob("kvdiag-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kvdiag/examples/vllm-b-saturation/server.log" in names
    assert any(n.startswith("kvdiag/examples/vllm-b-saturation/metrics/") for n in names)
    assert "kvdiag/examples/vllm-b2-saturation-larger-pool/server.log" in names
    assert "kvdiag/reports/schema/compare.schema.json" in names
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    return target


def _run(target: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(target), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True)


@pytest.mark.slow
def test_example_runs_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    where = _run(
        installed,
        "-c",
        "import kvdiag.cli.examples as e; print(e.example_path('vllm-b-saturation'))",
        cwd=tmp_path,
    )
    assert where.stdout.strip().startswith(str(installed)), where
    result = _run(
        installed,
        "-m",
        "kvdiag",
        "analyze",
        "--example",
        "vllm-b-saturation",
        "-f",
        "json",
        "-q",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"]["primary"] == "saturation"
    assert doc["facts"]["pool_tokens"]["value"] == 8704


@pytest.mark.slow
def test_compare_help_example_runs_from_the_installed_wheel(
    installed: Path, tmp_path: Path
) -> None:
    """`kvdiag compare --help` teaches with the bundled pair; that example runs as printed."""
    helped = _run(installed, "-m", "kvdiag", "compare", "--help", cwd=tmp_path)
    example = next(
        line.strip() for line in helped.stdout.splitlines() if "example:vllm-b-saturation" in line
    )
    args = example.split()[1:]  # drop the program name
    result = _run(installed, "-m", "kvdiag", *args, "-f", "json", "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # improved
    doc = json.loads(result.stdout)
    assert doc["outcome"] == "improved"
    assert "kv_cache_memory_bytes" in {c["setting"] for c in doc["changes"]}
