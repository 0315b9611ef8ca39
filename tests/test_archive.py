"""Incident archives are unpacked safely; refused members are listed with the reason."""

from __future__ import annotations

import io
import json
import re
import tarfile
import zipfile
from pathlib import Path

from kvdiag.analyzer.discovery.archive import Limits, unpack
from kvdiag.domain.exitcodes import ExitCode
from tests.conftest import FIXTURES, ROOT, analyze_json, run_cli

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"
# 20 MiB of zeros gzip to ~20 kB: past the 250:1 ratio after about 6 MB. A tar header
# carries no compressed size, so only the copy can see it.
ZEROS = b"\0" * (20 << 20)
README = (ROOT / "README.md").read_text()
BOMB_REFUSED = (
    r"extraction stopped: expands beyond [0-9,]+ bytes "
    r"\(ratio limit 250:1 or total limit 34,359,738,368\)"
)


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


def _tar_bomb(path: Path, *before: tuple[str, bytes]) -> Path:
    """A .tar.gz whose last member, zeros.log, expands far past the ratio limit."""
    members = [(_info(name), data) for name, data in before]
    return _tar(path, [*members, (_info("zeros.log"), ZEROS)])


def test_a_bomb_member_is_refused_by_name_and_not_left_cut_short(tmp_path: Path) -> None:
    state = unpack(_tar_bomb(tmp_path / "bomb.tar.gz", ("ok.txt", b"fine\n")), tmp_path / "s")
    assert [(r.path, r.status) for r in state.refused] == [("bomb.tar.gz!zeros.log", "refused")]
    assert re.fullmatch(BOMB_REFUSED, state.refused[0].reason)
    assert [p.name for p in state.root.rglob("*")] == ["ok.txt"]


def test_a_too_large_archive_exits_with_the_readme_code_and_says_why(tmp_path: Path) -> None:
    bomb = _tar_bomb(tmp_path / "bomb.tar.gz")
    result = run_cli("analyze", str(bomb))
    assert result.exit_code == ExitCode.NO_INPUT
    readme_row = re.search(rf"^\| {int(result.exit_code)} \| (.*) \|$", README, flags=re.M)
    assert readme_row and "nothing in it could be ingested" in readme_row.group(1)
    first, *listed = result.stderr.splitlines()
    assert first == f"kvdiag: {bomb}: no file in it is a known input (1 set aside)"
    assert len(listed) == 1 and listed[0].startswith("  bomb.tar.gz!zeros.log: refused: ")
    assert re.fullmatch(BOMB_REFUSED, listed[0].split(": refused: ", 1)[1])


def test_a_bomb_beside_a_log_is_listed_and_the_log_analysed(tmp_path: Path) -> None:
    log = (SATURATION / "server.log").read_bytes()
    code, doc = analyze_json(_tar_bomb(tmp_path / "bomb.tar.gz", ("server.log", log)))
    assert code == ExitCode.FINDINGS
    assert doc["verdict"]["primary"] == "saturation"
    status = {i["path"]: i["status"] for i in doc["inputs"]}
    assert status == {"server.log": "used", "bomb.tar.gz!zeros.log": "refused"}
