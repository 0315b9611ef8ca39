"""Incident archives are unpacked safely; refused members are listed with the reason."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

from kvdiag.analyzer.discovery.archive import Limits, unpack
from kvdiag.analyzer.exitcodes import ExitCode
from tests.conftest import FIXTURES, analyze_json, run_cli

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def test_tgz_of_a_fixture_gives_the_same_verdict_with_member_paths(tmp_path: Path) -> None:
    archive = tmp_path / "incident.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(SATURATION, arcname="incident")
    code, doc = analyze_json(archive)
    assert code == ExitCode.FINDINGS
    assert doc["verdict"]["primary"] == "saturation"
    assert any(i["path"] == "incident/server.log" and i["status"] == "used" for i in doc["inputs"])


def test_hostile_tar_members_are_refused_and_listed(tmp_path: Path) -> None:
    log = (SATURATION / "server.log").read_bytes()
    archive = _tar(
        tmp_path / "evil.tar.gz",
        [
            (_info("server.log"), log),
            (_info("../escape.txt"), b"climb out"),
            (_info("/etc/evil"), b"absolute"),
            (_info("link", tarfile.SYMTYPE, "/etc/passwd"), None),
            (_info("hard", tarfile.LNKTYPE, "server.log"), None),
            (_info("dev", tarfile.CHRTYPE), None),
        ],
    )
    code, doc = analyze_json(archive)
    assert code in (ExitCode.OK, ExitCode.FINDINGS)
    refused = {i["path"]: i["reason"] for i in doc["inputs"] if i["status"] == "refused"}
    assert set(refused) == {
        "evil.tar.gz!../escape.txt",
        "evil.tar.gz!/etc/evil",
        "evil.tar.gz!link",
        "evil.tar.gz!hard",
        "evil.tar.gz!dev",
    }
    assert "link" in refused["evil.tar.gz!link"]
    assert not (tmp_path / "escape.txt").exists()


def test_zip_bomb_and_member_limits(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.log", b"\0" * (20 << 20))
        zf.writestr("ok.txt", b"fine\n")
    state = unpack(bomb, tmp_path / "s1")
    reasons = {r.path: r.reason for r in state.refused}
    assert "ratio" in reasons["bomb.zip!zeros.log"]
    assert (state.root / "ok.txt").read_bytes() == b"fine\n"

    many = tmp_path / "many.zip"
    with zipfile.ZipFile(many, "w") as zf:
        for i in range(10):
            zf.writestr(f"f{i}.txt", b"x\n")
    state = unpack(many, tmp_path / "s2", Limits(max_members=5))
    assert state.members == 6 and "more than 5 members" in state.refused[-1].reason


def test_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    incident = tmp_path / "incident"
    incident.mkdir()
    (incident / "server.log").write_bytes((SATURATION / "server.log").read_bytes())
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    (incident / "peek.txt").symlink_to(secret)
    result = run_cli("analyze", str(incident), "-f", "json", "-q")
    doc = json.loads(result.stdout)
    (peek,) = [i for i in doc["inputs"] if i["path"] == "peek.txt"]
    assert peek["status"] == "refused" and "outside" in peek["reason"]
