"""Property tests over the small-input parsers: nvidia-smi (table, CSV, XML), config.json,
launch flags; and over archive extraction. No exception, every line accounted for, frames
the store accepts, and nothing written outside the scratch folder."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import warnings
import zipfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kvdiag.analyzer.discovery import archive
from kvdiag.analyzer.discovery.discover import discover
from tests.conftest import FIXTURES
from tests.property_support import (
    any_bytes,
    check_ingest,
    deep_nesting,
    encode,
    encode_json,
    hostile_number,
    hostile_word,
    lines_from,
    mutated,
)
from tests.test_nvidia_smi import CSV_LOOP
from tests.test_nvidia_smi_xml import XML_DOC

NVSMI_TABLE = tuple(
    (FIXTURES / "gpu-shrunken-pool-a100-case-study" / "incident" / "nvidia-smi.txt")
    .read_text()
    .splitlines()
)
NVSMI_CSV = (
    *CSV_LOOP.splitlines(),
    "index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]",
    "0, NVIDIA A10G, 23028 MiB, 3 MiB, [N/A]",
    "pid, process_name, used_gpu_memory [MiB]",
    "48211, /usr/bin/python3, 59380 MiB",
)
NVSMI_XML = tuple(XML_DOC.format(sec="01", used="21000", free="3218").splitlines())


@given(any_bytes())
def test_nvidia_smi_any_bytes(data: bytes) -> None:
    check_ingest("nvidia_smi", "nvidia-smi.txt", data)


@given(lines_from(NVSMI_TABLE, max_lines=24))
def test_nvidia_smi_table_mutated(data: bytes) -> None:
    check_ingest("nvidia_smi", "nvidia-smi.txt", data)


@given(lines_from(NVSMI_CSV, max_lines=12))
def test_nvidia_smi_csv_mutated(data: bytes) -> None:
    check_ingest("nvidia_smi", "nvidia-smi.csv", data)


@st.composite
def nvsmi_xml(draw: st.DrawFn) -> bytes:
    """The XML document with values (and sometimes the structure) mutated."""
    lines = [mutated(t, draw) if draw(st.integers(0, 3)) == 0 else t for t in NVSMI_XML]
    if draw(st.booleans()):
        lines = lines[: draw(st.integers(0, len(lines)))]  # cut off
    return encode("\n".join(lines) * draw(st.integers(1, 2)), draw)


@given(nvsmi_xml())
def test_nvidia_smi_xml_mutated(data: bytes) -> None:
    check_ingest("nvidia_smi", "nvidia-smi.xml", data)


# ------------------------------------------------------------------ config.json

_CONFIG = json.loads(
    (FIXTURES / "gpu-shrunken-pool-a100-case-study" / "incident" / "config.json").read_text()
)
json_scalar = (
    st.none() | st.booleans() | st.integers() | st.floats() | hostile_word | hostile_number
)
any_json = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
MODEL_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "torch_dtype",
    "max_position_embeddings",
    "sliding_window",
    "sliding_window_pattern",
    "layer_types",
    "hybrid_override_pattern",
    "attn_layer_period",
    "attn_layer_offset",
    "full_attention_interval",
    "use_sliding_window",
    "max_window_layers",
    "kv_lora_rank",
    "architectures",
    "model_type",
    "text_config",
)


@st.composite
def model_config(draw: st.DrawFn) -> bytes:
    cfg = dict(_CONFIG)
    for key in draw(st.lists(st.sampled_from(MODEL_KEYS), max_size=6)):
        cfg[key] = draw(any_json | st.integers(-(2**70), 2**70))
    if draw(st.integers(0, 4)) == 0:
        cfg = {"text_config": cfg, "model_type": draw(any_json)}
    return encode_json(cfg, draw, indent=2)


@given(any_bytes())
def test_model_config_any_bytes(data: bytes) -> None:
    check_ingest("model_config", "config.json", data)


@given(model_config())
def test_model_config_any_values(data: bytes) -> None:
    check_ingest("model_config", "config.json", data)


def test_model_config_deep_nesting_is_a_problem_not_a_crash() -> None:
    data = deep_nesting(b'{"num_hidden_layers": 2, "x": ')
    _, problems = check_ingest("model_config", "config.json", data)
    assert any("nested deeper" in p.message for p in problems)


# ------------------------------------------------------------------ launch flags

LAUNCH = tuple(
    (FIXTURES / "vllm-h-padding-waste" / "incident" / "launch.txt").read_text().splitlines()
)
FLAGS = (
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-seqs",
    "--block-size",
    "--tensor-parallel-size",
    "--kv-cache-memory",
    "--enable-prefix-caching",
    "--kv-cache-dtype",
    "-tp",
)


@st.composite
def command(draw: st.DrawFn) -> bytes:
    words = [draw(st.sampled_from(["vllm serve m", "python -m vllm.entrypoints.api_server"]))]
    for _ in range(draw(st.integers(0, 6))):
        flag = draw(st.sampled_from(FLAGS) | hostile_word)
        value = draw(hostile_number | hostile_word)
        words.append(draw(st.sampled_from([f"{flag} {value}", f"{flag}={value}", flag])))
    sep = draw(st.sampled_from([" ", " \\\n  ", "\x00"]))
    text = sep.join(words)
    if draw(st.booleans()):
        text = json.dumps(text.split())
    return encode(text, draw)


@given(any_bytes())
def test_launch_flags_any_bytes(data: bytes) -> None:
    check_ingest("launch_flags", "cmdline", data)


@given(command())
def test_launch_flags_hostile_commands(data: bytes) -> None:
    check_ingest("launch_flags", "cmdline", data)


@given(lines_from(LAUNCH, max_lines=40))
def test_launch_txt_mutated(data: bytes) -> None:
    check_ingest("launch_flags", "launch.txt", data)


# ------------------------------------------------------------------ archives

MEMBER_NAMES = (
    "server.log",
    "metrics/1795959281.911.prom",
    "../escape.log",
    "../../escape.log",
    "/etc/cron.d/evil",
    "a/../../escape.log",
    "C:evil.log",
    "..\\windows.log",
    "a",
    "a/b.log",
    ".",
    "./x.log",
    "x" * 300,
    "dir/",
    "nested.zip",
)
MEMBER_KINDS = ("file", "file", "dir", "symlink", "hardlink", "fifo", "chardev")


@st.composite
def archive_bytes(draw: st.DrawFn) -> tuple[str, bytes]:
    members = draw(
        st.lists(
            st.tuples(
                st.sampled_from(MEMBER_NAMES) | st.text(min_size=1, max_size=12),
                st.sampled_from(MEMBER_KINDS),
                st.binary(max_size=64) | st.just(b"INFO 05-01 10:00:00 [x.py:1] hi\n" * 50),
            ),
            max_size=6,
        )
    )
    fmt = draw(st.sampled_from(["tar", "tar.gz", "zip"]))
    data = _zip(members) if fmt == "zip" else _tar(members, fmt == "tar.gz")
    if draw(st.integers(0, 3)) == 0:  # damaged: truncated or a byte flipped
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        data = (
            data[:at]
            if draw(st.booleans())
            else data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
        )
    return fmt, data


def _tar(members: list[tuple[str, str, bytes]], gz: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, content in members:
            info = tarfile.TarInfo(name.replace("\x00", ""))
            info.type = {
                "file": tarfile.REGTYPE,
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chardev": tarfile.CHRTYPE,
            }[kind]
            info.linkname = "/etc/passwd" if kind in ("symlink", "hardlink") else ""
            info.size = len(content) if kind == "file" else 0
            tf.addfile(info, io.BytesIO(content) if kind == "file" else None)
    return buf.getvalue()


def _zip(members: list[tuple[str, str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        warnings.simplefilter("ignore")  # duplicate names are part of the attack
        for name, kind, content in members:
            info = zipfile.ZipInfo(name.replace("\x00", "") or "empty")
            if kind == "symlink":
                info.external_attr = 0o120777 << 16
                content = b"/etc/passwd"
            zf.writestr(info, content)
    return buf.getvalue()


def _outside(outer: Path, scratch: Path) -> set[str]:
    """Everything under `outer` that is not in the scratch folder."""
    return {str(p) for p in outer.rglob("*") if scratch not in (p, *p.parents)}


@given(archive_bytes())
def test_archive_extraction_stays_inside(case: tuple[str, bytes]) -> None:
    fmt, data = case
    outer = Path(tempfile.mkdtemp(prefix="kvdiag-archive-"))
    try:
        incident, scratch = outer / f"incident.{fmt}", outer / "scratch"
        incident.write_bytes(data)
        scratch.mkdir()
        before = _outside(outer, scratch)
        found = discover(incident, scratch)
        assert _outside(outer, scratch) == before
        for path in scratch.rglob("*"):
            assert not path.is_symlink(), path
            assert path.is_dir() or path.is_file(), path
        listed = {r.path for r in found.set_aside} | {r for u in found.units for r in u.rels}
        assert all(".." not in Path(p).parts for p in listed if "!" not in p)
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@given(archive_bytes())
def test_archive_unpack_lists_what_it_refuses(case: tuple[str, bytes]) -> None:
    fmt, data = case
    outer = Path(tempfile.mkdtemp(prefix="kvdiag-archive-"))
    try:
        path = outer / f"a.{fmt}"
        path.write_bytes(data)
        unpacked = archive.unpack(path, outer / "scratch")
        written = [p for p in unpacked.root.rglob("*") if p.is_file()]
        assert len(written) == len(unpacked.written) <= unpacked.members
        assert all(r.status == "refused" and r.reason for r in unpacked.refused)
        assert os.path.commonpath([unpacked.root, outer / "scratch"]) == str(outer / "scratch")
    finally:
        shutil.rmtree(outer, ignore_errors=True)
