"""Notes or a ticket that quote a log's messages defer to the log itself when it is there."""

from __future__ import annotations

import shutil
from pathlib import Path

from kvdiag.analyzer.discovery.discover import discover
from tests.conftest import FIXTURES

REFUSAL = FIXTURES / "vllm-e-startup-refusal" / "incident"
# The recorded run's NOTES.md, line 6: the engine's refusal quoted inside a sentence.
NOTE = (
    "- The EngineCore raises `ValueError: To serve at least one request with the model's max "
    "seq len (4096), (0.01 GiB KV cache is needed, which is larger than the available KV "
    "cache memory (0.0 GiB). Based on the available memory, the estimated maximum model length "
    "is 1920. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
    "initializing the engine.` and the server exits 1.\n"
)


def _kinds(folder: Path) -> dict[str, tuple[str, str]]:
    found = discover(folder)
    used = {rel: ("used", "") for unit in found.units for rel in unit.rels}
    aside = {r.path: (r.status, r.reason) for r in found.set_aside}
    return used | aside


def test_notes_quoting_the_log_are_set_aside_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    shutil.copytree(REFUSAL, folder)
    (folder / "NOTES.md").write_text("# what happened\n\n" + NOTE)
    kinds = _kinds(folder)
    assert kinds["server.log"] == ("used", "")
    status, reason = kinds["NOTES.md"]
    assert status == "skipped"
    assert "server.log holds the log itself" in reason


def test_the_same_notes_alone_are_read(tmp_path: Path) -> None:
    (tmp_path / "NOTES.md").write_text("# what happened\n\n" + NOTE)
    assert _kinds(tmp_path)["NOTES.md"] == ("used", "")
