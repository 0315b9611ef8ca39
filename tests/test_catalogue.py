"""The catalogue of the engines' KV-, memory- and scheduling messages against the packs.

kvdiag/analyzer/ingest/logs/catalogue.tsv lists every logger call and raised error of vLLM
and SGLang releases whose text is about the KV cache, memory, preemption/retraction, the
queue or admission limits (tools/catalogue/extract.py reads them from the engines' source
distributions). Each row names the pack event its sample line parses to, or why none is
needed. Here every sample is built from its format string, put behind the engine's header
and parsed by the pack; rows marked as gaps are counted (`coverage()`), not failed.

    .venv/bin/python -m tests.test_catalogue    # prints the coverage
"""

from __future__ import annotations

import json
import textwrap
from functools import cache
from pathlib import Path

import pytest

from kvdiag.analyzer.ingest.logs.format_pack import load_pack
from tools.catalogue import extract
from tools.catalogue.check import PACKS, Outcome, outcomes
from tools.catalogue.reasons import REASON_KINDS
from tools.catalogue.samples import fill, header, sample
from tools.catalogue.table import COLUMNS, read_table, version_key

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "kvdiag" / "analyzer" / "ingest" / "logs" / "catalogue.tsv"


@cache
def _rows() -> tuple[dict[str, str], ...]:
    return tuple(read_table(TABLE))


@cache
def _outcomes() -> tuple[Outcome, ...]:
    return tuple(outcomes(list(_rows())))


def coverage() -> tuple[int, int]:
    """(rows with a pack entry, rows that need one: those plus the rows marked 'gap: ')."""
    rows = _rows()
    covered = sum(1 for r in rows if r["pack_entry"])
    return covered, covered + sum(1 for r in rows if r["why_none"].startswith("gap: "))


def _with_entry() -> list[tuple[int, dict[str, str]]]:
    return [(i, r) for i, r in enumerate(_rows()) if r["pack_entry"]]


# ---------------------------------------------------------------- the table


def test_table_header_is_the_tools_columns() -> None:
    header_line = next(
        ln for ln in TABLE.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")
    )
    assert tuple(header_line.split("\t")) == COLUMNS


def test_every_row_has_a_pack_entry_or_a_reason_of_a_known_kind() -> None:
    for row in _rows():
        assert bool(row["pack_entry"]) != bool(row["why_none"]), row
        if row["why_none"]:
            assert row["why_none"].startswith(REASON_KINDS), row["why_none"]
        for entry in filter(None, row["pack_entry"].split("+")):
            pack, _, event = entry.partition(":")
            assert pack == PACKS[row["engine"]], row
            assert event in {e.id for e in load_pack(pack).events}, entry


def test_release_columns_agree() -> None:
    for row in _rows():
        first, last = row["first_release"], row["last_release"]
        assert version_key(first) <= version_key(last), row
        assert row["releases"].startswith(first) and row["releases"].endswith(last), row
        assert row["source"].startswith(f"{row['engine']}/"), row


def test_the_capacity_messages_kvdiag_knows_are_in_the_catalogue() -> None:
    """The extraction finds the lines the packs were written from (an oracle independent
    of the tool: the packs' own variants, written from real logs)."""
    messages = {(r["engine"], r["message"]) for r in _rows()}
    for engine, text in [
        ("vllm", "# GPU blocks: {}, # CPU blocks: {}"),
        ("vllm", "Maximum concurrency for {} tokens per request: {}x"),
        ("vllm", "Available KV cache memory: {} GiB"),
        (
            "vllm",
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
            " when initializing the engine.",
        ),
        (
            "sglang",
            "KV cache pool is full. Retract requests."
            " #retracted_reqs: {}, #new_token_ratio: {} -> {}",
        ),
        (
            "sglang",
            "Decode out of memory happened. #retracted_reqs: {}, #new_token_ratio: {} -> {}",
        ),
    ]:
        assert (engine, text) in messages, text


# ---------------------------------------------------------------- samples against the packs


@pytest.mark.parametrize(
    ("index", "row"),
    _with_entry(),
    ids=[f"{r['engine']}:{r['pack_entry']}:{i}" for i, r in _with_entry()],
)
def test_sample_parses_to_its_pack_entry(index: int, row: dict[str, str]) -> None:
    got = _outcomes()[index]
    assert got.entry == row["pack_entry"], got.sample


def test_rows_without_a_pack_entry_parse_to_no_event() -> None:
    """A row that says none is needed, or that marks a gap, must not be read by a pack:
    when a pack learns a message, its row here must name the event."""
    parsed = [
        f"{o.entry}: {o.sample}"
        for r, o in zip(_rows(), _outcomes(), strict=True)
        if not r["pack_entry"] and o.events
    ]
    assert not parsed, "\n".join(parsed)


def test_coverage_counts_rows_that_need_an_entry() -> None:
    covered, needed = coverage()
    rows = _rows()
    assert covered == len(_with_entry()) > 0
    assert covered < needed < len(rows)


# ---------------------------------------------------------------- the sample builder


def _row(**cells: str) -> dict[str, str]:
    base = dict.fromkeys(COLUMNS, "")
    base.update(engine="vllm", level="INFO", last_release="0.11.2", source="vllm/x.py:7")
    base.update(args="[]")
    return {**base, **cells}


def test_header_follows_engine_release_and_process() -> None:
    assert header(_row(last_release="0.6.6"), 0) == "INFO 11-29 00:00:00 x.py:7] "
    assert header(_row(), 61) == "INFO 11-29 00:01:01 [x.py:7] "
    v1 = _row(source="vllm/v1/core/kv_cache_utils.py:12 (+1)", level="WARNING")
    assert (
        header(v1, 0) == "(EngineCore_DP0 pid=123) WARNING 11-29 00:00:00 [kv_cache_utils.py:12] "
    )
    assert header(_row(engine="sglang"), 0) == "[2025-01-01 00:00:00 TP0] "


def test_placeholders_get_values_of_their_kind() -> None:
    row = _row(
        message="Free {} GiB, {} blocks of {} tokens, ratio {}, {{x}}",
        args=json.dumps(
            [["free / GiB", ".2f"], ["num_gpu_blocks", "%d"], ["max_model_len", ""], ["ratio", ""]]
        ),
    )
    assert fill(row) == "Free 12.50 GiB, 4096 blocks of 4096 tokens, ratio 0.9, {x}"
    assert (
        fill({**row, "values": '["1", "2", "3", "4"]'})
        == "Free 1 GiB, 2 blocks of 3 tokens, ratio 4, {x}"
    )
    raised = _row(level="raise ValueError", message="No memory", args="[]")
    assert sample(raised) == "ValueError: No memory"


# ---------------------------------------------------------------- the extractor


_SCHEDULER = """
import logging
logger = logging.getLogger(__name__)

def schedule(seq_group, mode, n):
    logger.warning("Sequence group %s is preempted by %s mode because there is not "
                   "enough KV cache space.", seq_group.request_id, mode)
    logger.info(f"# GPU blocks: {n}, # CPU blocks: {n:,}")
    logger.info("Loaded tokenizer %s", n)
    logger.info("KV cache config: {'blocks': %d}", n)
    msg = "Avg prompt throughput: %.1f tokens/s"
    msg += ", GPU KV cache usage: %.1f%%"
    logger.info(msg, 1.0, 2.0)
    line = f"Decode batch. #running-req: {n}, "
    if n:
        line += f"gen throughput (token/s): {n:.2f}, "
    else:
        line += f"accept len: {n:.2f}, "
    if n > 1:
        line += "largest-len: 1, "
    line += f"#queue-req: {n}"
    logger.info(line)
    prefix = "KV cache pool is full. Retract requests. " if n else "Testing retraction. "
    details = f"#retracted_reqs: {n}"
    logger.warning(prefix + details)
"""
_REFUSAL = """
def refuse(n):
    raise ValueError("The model's max seq len ({}) is larger than the KV cache ({})".format(n, n))
"""
_CPU_WORKER = """
def check(free, want):
    if free < want:
        raise RuntimeError(f"Available memory on node 0 ({free:.2f} GiB) is less than {want} GiB")
    log_fn = logger.debug if free else logger.info
    parts = ["Running: %d reqs", "Waiting: %d reqs"]
    if free:
        parts.append("Swapped: %d reqs")
    parts.extend(["KV cache usage: %.1f%%"])
    log_fn(", ".join(parts), 1, 2, 3.0)
    raise NotImplementedError("KV cache swap")
"""


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.fixture
def engines(tmp_path: Path) -> Path:
    _tree(tmp_path / "vllm-0.1.0", {"vllm/core/scheduler.py": _SCHEDULER + _REFUSAL})
    _tree(
        tmp_path / "vllm-0.2.0",
        {
            "vllm/core/scheduler.py": _SCHEDULER,
            "vllm/worker/cpu_worker.py": "import logging\nlogger = logging.getLogger()\n"
            + _CPU_WORKER,
            "vllm/tests/test_kv.py": "logger.info('KV cache test')\n",
        },
    )
    _tree(tmp_path / "vllm-0.10.0", {"vllm/core/scheduler.py": "\n\n" + _SCHEDULER + _REFUSAL})
    return tmp_path


def test_extractor_reads_every_message_form(engines: Path) -> None:
    rows, preamble = extract.build(engines, [])
    got = {(r["level"], r["message"]): r for r in rows}
    assert set(got) == {
        (
            "WARNING",
            "Sequence group {} is preempted by {} mode because there is not enough KV cache space.",
        ),
        ("INFO", "# GPU blocks: {}, # CPU blocks: {}"),
        ("INFO", "KV cache config: {{'blocks': {}}}"),
        ("INFO", "Avg prompt throughput: {} tokens/s, GPU KV cache usage: {}%"),
        ("raise ValueError", "The model's max seq len ({}) is larger than the KV cache ({})"),
        ("raise RuntimeError", "Available memory on node 0 ({} GiB) is less than {} GiB"),
        ("INFO", "Running: {} reqs, Waiting: {} reqs, KV cache usage: {}%"),
        # Each branch of an if/else is a line of its own; a part under a bare `if` is left out.
        ("INFO", "Decode batch. #running-req: {}, gen throughput (token/s): {}, #queue-req: {}"),
        ("INFO", "Decode batch. #running-req: {}, accept len: {}, #queue-req: {}"),
        # Locals joined by `+` at the call, one line per branch of the prefix.
        ("WARNING", "KV cache pool is full. Retract requests. #retracted_reqs: {}"),
        ("WARNING", "Testing retraction. #retracted_reqs: {}"),
    }
    assert "vllm 0.1.0, 0.2.0, 0.10.0" in preamble
    preempt = got[
        "WARNING",
        "Sequence group {} is preempted by {} mode because there is not enough KV cache space.",
    ]
    assert (preempt["releases"], preempt["backends"]) == ("0.1.0-0.10.0", "all")
    assert preempt["source"] == "vllm/core/scheduler.py:8"  # the newest release's line
    assert json.loads(preempt["args"]) == [["seq_group.request_id", "%s"], ["mode", "%s"]]
    refusal = got[
        "raise ValueError", "The model's max seq len ({}) is larger than the KV cache ({})"
    ]
    assert (refusal["first_release"], refusal["releases"]) == ("0.1.0", "0.1.0,0.10.0")
    cpu = got["raise RuntimeError", "Available memory on node 0 ({} GiB) is less than {} GiB"]
    assert (cpu["backends"], json.loads(cpu["args"])[0]) == ("cpu", ["free", ".2f"])
    blocks = got["INFO", "# GPU blocks: {}, # CPU blocks: {}"]
    assert fill(blocks) == "# GPU blocks: 4096, # CPU blocks: 123,456"
    assert (
        fill(got["INFO", "KV cache config: {{'blocks': {}}}"])
        == "KV cache config: {'blocks': 4096}"
    )


def test_extractor_keeps_the_hand_columns_of_the_previous_table(engines: Path) -> None:
    first, _ = extract.build(engines, [])
    kept = {**first[0], "pack_entry": "vllm_log:x", "values": "[]"}
    again, _ = extract.build(engines, [kept])
    assert again[0]["pack_entry"] == "vllm_log:x" and again[0]["values"] == "[]"
    assert all(not r["pack_entry"] for r in again[1:])


if __name__ == "__main__":
    done, need = coverage()
    share = 100 * done / need
    print(f"catalogue coverage: {done}/{need} = {share:.1f}% of the rows that need a pack entry")
