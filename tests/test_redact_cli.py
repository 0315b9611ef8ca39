"""`kvdiag redact`: the bundle kinds, the mapping beside the bundle, REDACTED.md, what is
withheld or copied, and the errors a user can make."""

from __future__ import annotations

import errno
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from kvdiag.domain.exitcodes import ExitCode
from tests.conftest import FIXTURES, analyze_json, run_cli

SOURCE = FIXTURES / "vllm-b-saturation" / "incident"
_ACCESS = 'INFO:     10.7.7.7:5000 - "POST /v1/completions HTTP/1.1" 200 OK\n'


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A real log with a client address, a note kvdiag does not read, and a binary file."""
    folder = tmp_path / "in"
    folder.mkdir()
    log = (SOURCE / "server.log").read_text()
    (folder / "server.log").write_text(log + _ACCESS)
    (folder / "notes.txt").write_text("ssh ops@gpu-3.acme.internal, then ask bob@acme.com\n")
    (folder / "core.bin").write_bytes(b"\x00\x01secret\x00" * 100)
    return folder


@pytest.mark.parametrize("name", ["out.tar.gz", "out.tgz", "out.tar", "out.zip", "outdir"])
def test_every_bundle_kind_holds_the_redacted_files(small: Path, tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    result = run_cli("redact", str(small), "-o", str(out))
    assert result.exit_code == 0, result.output
    if out.is_dir():
        members = {p.name: p.read_text() for p in out.iterdir()}
    elif name.endswith(".zip"):
        with zipfile.ZipFile(out) as zf:
            members = {n: zf.read(n).decode() for n in zf.namelist()}
    else:
        with tarfile.open(out) as tf:
            members = {m.name: tf.extractfile(m).read().decode() for m in tf.getmembers()}  # type: ignore[union-attr]
    assert sorted(members) == ["REDACTED.md", "notes.txt", "server.log"]
    mapping = json.loads((tmp_path / f"{name}.map.json").read_text())
    (client,) = [k for k, v in mapping["categories"]["ip"].items() if v == "10.7.7.7"]
    assert "10.7.7.7" not in members["server.log"] and f"{client}:5000" in members["server.log"]
    assert "gpu-3.acme.internal" not in members["notes.txt"]
    assert "bob@acme.com" not in members["notes.txt"]
    summary = members["REDACTED.md"]
    assert "core.bin" in summary and "binary content" in summary  # withheld, and why
    assert "Not understood by kvdiag" in summary and "notes.txt" in summary
    assert "10.7.7.7" not in summary
    assert (tmp_path / f"{name}.map.json").stat().st_mode & 0o777 == 0o600
    assert "withheld core.bin" in result.stderr and "ip 2" in result.stderr


def test_the_bundle_analyses_as_the_source_and_its_summary_is_no_input(
    small: Path, tmp_path: Path
) -> None:
    out = tmp_path / "b.tar.gz"
    assert run_cli("redact", str(small), "-o", str(out), "-q").exit_code == 0
    _, original = analyze_json(small)
    _, redacted = analyze_json(out)
    assert redacted["verdict"]["primary"] == original["verdict"]["primary"]
    (summary,) = [i for i in redacted["inputs"] if i["path"] == "REDACTED.md"]
    assert "redaction" in summary["reason"]


def test_keep_leaves_a_category_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "kept"
    assert run_cli("redact", str(SOURCE), "-o", str(out), "--keep", "model", "-q").exit_code == 0
    assert "/opt/tinymodel" in (out / "launch.txt").read_text()
    assert "| model | kept, as asked |" in (out / "REDACTED.md").read_text()


def test_an_archive_in_gives_an_archive_out(tmp_path: Path) -> None:
    archive = tmp_path / "incident.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(SOURCE / "server.log", arcname="server.log")
    out = tmp_path / "shared.zip"
    assert run_cli("redact", str(archive), "-o", str(out), "-q").exit_code == 0
    with zipfile.ZipFile(out) as zf:
        assert sorted(zf.namelist()) == ["REDACTED.md", "server.log"]
        assert "/opt/tinymodel" not in zf.read("server.log").decode()


def test_the_mapping_may_not_go_into_the_bundle(tmp_path: Path) -> None:
    out = tmp_path / "outdir"
    result = run_cli("redact", str(SOURCE), "-o", str(out), "--map", str(out / "map.json"))
    assert result.exit_code == ExitCode.USAGE
    assert "inside the bundle" in result.output
    assert not out.exists()


def test_a_folder_that_is_not_empty_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = run_cli("redact", str(SOURCE), "-o", str(out))
    assert result.exit_code == ExitCode.USAGE
    assert (out / "keep.txt").read_text() == "mine"


def test_a_missing_incident_is_an_input_error(tmp_path: Path) -> None:
    result = run_cli("redact", str(tmp_path / "nope"), "-o", str(tmp_path / "x.tar.gz"))
    assert result.exit_code == ExitCode.NO_INPUT
    assert not (tmp_path / "x.tar.gz").exists()
    assert list(tmp_path.iterdir()) == []  # no half bundle, no mapping


def test_keep_without_redact_is_a_usage_error() -> None:
    result = run_cli("analyze", str(SOURCE), "--keep", "model")
    assert result.exit_code == ExitCode.USAGE
    assert "--redact" in result.output


def test_archive_members_analyze_would_refuse_are_withheld_and_listed(tmp_path: Path) -> None:
    archive = tmp_path / "hostile.tar"
    with tarfile.open(archive, "w") as tf:
        tf.add(SOURCE / "server.log", arcname="server.log")
        evil = tarfile.TarInfo("../../evil.txt")
        payload = b"HF_TOKEN=hf_" + b"x" * 34 + b"\n"
        evil.size = len(payload)
        tf.addfile(evil, io.BytesIO(payload))
    out = tmp_path / "out"
    assert run_cli("redact", str(archive), "-o", str(out), "-q").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["REDACTED.md", "server.log"]
    summary = (out / "REDACTED.md").read_text()
    assert "## Withheld" in summary and "evil.txt" in summary
    assert not (tmp_path / "evil.txt").exists()


def test_a_full_disk_leaves_no_half_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvdiag.redact.outputs import BundleWriter

    def full(self: BundleWriter, rel: str, mtime: float) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(BundleWriter, "entry", full)
    out = tmp_path / "b.tar.gz"
    result = run_cli("redact", str(SOURCE), "-o", str(out))
    assert result.exit_code == ExitCode.NO_SPACE
    assert "disk is full" in result.output
    assert list(tmp_path.iterdir()) == []
