"""nvidia-smi captures: the real pastes of ../shared/realdata/issues, then layouts they lack."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from kvdiag.analyzer.ingest.gpu.nvidia_smi import name_time
from kvdiag.analyzer.ingest.rows import count_lines
from tests.conftest import SHARED, shared
from tests.ingest_helpers import ingest, kind_of, write

ISSUES = "realdata/issues"
# The regex vllm-formats.md §5.2 gives for the memory cell: an independent reading of the text.
MEMORY_CELL = re.compile(r"\|\s+(\d+)MiB\s+/\s+(\d+)MiB\s+\|")


def _real(name: str) -> Path:
    return shared(ISSUES, name)


def _gpus(path: Path) -> list[dict[str, object]]:
    result = ingest(path)
    assert result.account.balanced()
    assert (
        result.account.lines_parsed == result.account.lines_total == count_lines(path.read_text())
    ), result.account
    return result.table("gpu_snapshots").sort("snapshot", "gpu").to_dicts()


def _captures(tables_only: bool = False) -> list[str]:
    """Names of the nvidia-smi pastes in realdata/issues (a placeholder that skips if absent)."""
    folder = SHARED / ISSUES
    paths = sorted(folder.glob("nvsmi-*")) if folder.is_dir() else []
    names = [p.name for p in paths if not tables_only or MEMORY_CELL.search(p.read_text())]
    return names or ["absent"]


@pytest.mark.parametrize("name", _captures())
def test_every_real_capture_is_recognised_and_fully_parsed(name: str) -> None:
    path = _real(name)
    assert kind_of(path) == "nvidia_smi"
    assert _gpus(path), "no GPU row"


@pytest.mark.parametrize("name", _captures(tables_only=True))
def test_table_memory_equals_every_memory_cell_of_the_text(name: str) -> None:
    path = _real(name)
    cells = [(float(u), float(t)) for u, t in MEMORY_CELL.findall(path.read_text())]
    rows = _gpus(path)
    assert [(r["memory_used_mib"], r["memory_total_mib"]) for r in rows] == cells
    assert [r["gpu"] for r in rows] == list(range(len(cells)))


def test_two_3090s_at_24058_of_24576_mib_under_vllm_tp2() -> None:
    rows = _gpus(_real("nvsmi-2x3090-vllm-tp2-1.nvsmi.txt"))
    assert [(r["gpu"], r["memory_used_mib"], r["memory_total_mib"]) for r in rows] == [
        (0, 24058, 24576),
        (1, 24058, 24576),
    ]
    assert {r["name"] for r in rows} == {"NVIDIA GeForce RTX 3090"}
    assert [r["bus_id"] for r in rows] == ["00000000:01:00.0", "00000000:02:00.0"]
    assert {r["driver_version"] for r in rows} == {"580.142"}
    assert {r["ts"] for r in rows} == {datetime(2026, 5, 6, 22, 25, 35)}  # the date header
    assert {r["source_kind"] for r in rows} == {"nvsmi_table"}
    assert [r["source_line"] for r in rows] == [10, 14]  # the memory rows


def test_busy_3090s_show_their_utilisation() -> None:
    rows = _gpus(_real("nvsmi-2x3090-busy-3.nvsmi.txt"))
    assert [(r["memory_used_mib"], r["utilization_pct"]) for r in rows] == [
        (22284, 68),
        (22292, 82),
    ]


def test_driver_610_kmd_header() -> None:
    rows = _gpus(_real("nvsmi-2x5090-kmd-header-2.nvsmi.txt"))
    assert {r["driver_version"] for r in rows} == {"610.57.04"}
    assert [(r["memory_used_mib"], r["memory_total_mib"]) for r in rows] == [
        (29340, 32607),
        (30612, 32607),
    ]


def test_8_l40s_with_one_vllm_worker_per_gpu() -> None:
    path = _real("nvsmi-8xL40S-vllm-tp8-ep-4.nvsmi.txt")
    result = ingest(path)
    gpus = result.table("gpu_snapshots")
    assert gpus.height == 8
    assert set(gpus["memory_total_mib"]) == {46068}
    assert gpus["memory_used_mib"].to_list() == [45397, 45249, 45249, 45241] * 2
    assert gpus["utilization_pct"].to_list() == [95, 96, 96, 95, 95, 96, 95, 95]
    procs = result.table("gpu_processes").sort("gpu").to_dicts()
    assert [(p["gpu"], p["pid"], p["process_name"]) for p in procs] == [
        (n, 2078 + n, f"VLLM::Worker_TP{n}_EP{n}") for n in range(8)
    ]
    assert [p["used_mib"] for p in procs] == [45388, 45240, 45240, 45232] * 2
    assert {p["process_type"] for p in procs} == {"C"}
    # The header lines were trimmed from this paste: the rows stand, undated.
    assert gpus["ts"].null_count() == 8 and gpus["driver_version"].null_count() == 8


def test_5060ti_query_csv_and_its_empty_compute_apps_query() -> None:
    path = _real("nvsmi-query-csv-5060ti-6.nvsmi.txt")
    result = ingest(path)
    (row,) = _gpus(path)
    assert row["name"] == "NVIDIA GeForce RTX 5060 Ti"
    assert (row["memory_total_mib"], row["memory_used_mib"], row["utilization_pct"]) == (
        16311,
        1,
        0,
    )
    assert row["driver_version"] == "580.178.04"
    assert row["gpu"] == 0 and row["source_kind"] == "nvsmi_csv" and row["source_line"] == 3
    assert "gpu_processes" not in result.tables
    assert "the compute-apps query listed no process" in result.account.notes


def test_windows_csv_with_na_process_memory() -> None:
    path = _real("nvsmi-query-csv-windows-5.nvsmi.txt")
    result = ingest(path)
    (gpu,) = _gpus(path)
    assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert (gpu["memory_total_mib"], gpu["memory_used_mib"], gpu["memory_free_mib"]) == (
        97887,
        71977,
        24622,
    )
    assert gpu["utilization_pct"] == 64
    procs = result.table("gpu_processes").to_dicts()
    assert [(p["pid"], p["process_name"], p["used_mib"], p["gpu"]) for p in procs] == [
        (3032, r"C:\Windows\System32\dwm.exe", None, 0),
        (13800, r"C:\Windows\explorer.exe", None, 0),
    ]


# Driver 535 layout (width 87), as `date; nvidia-smi` run twice in a loop from a prompt.
# Synthetic (the real pastes above are all width 91), laid out like 535.x output.
HEAD_535 = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.129.03             Driver Version: 535.129.03   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |
| N/A   33C    P0              61W / 400W |  73514MiB / 81920MiB |     {u0}%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  | 00000000:0F:00.0 Off |                    0 |
| N/A   35C    P0              66W / 400W |  42010MiB / 81920MiB |     {u1}%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+
~PAD~
+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
"""
PROCS_535 = """\
|    0   N/A  N/A   1032132      C   /usr/bin/python3                          73500MiB |
|    1   N/A  N/A   1032133      C   ...onda3/envs/serve/bin/python3.11        41996MiB |
|    1   N/A  N/A      3494      G   /usr/lib/xorg/Xorg                           4MiB |
"""
NO_PROCS_535 = "|  No running processes found" + " " * 59 + "|\n"
FOOT_535 = "+" + "-" * 87 + "+\n"
TABLE_535 = (
    "user@gpu-node-3:~$ nvidia-smi\n"
    "Tue May  5 10:00:00 UTC 2026\n"
    "Tue May  5 10:00:00 2026\n"
    + HEAD_535.format(u0=41, u1=39)
    + PROCS_535
    + FOOT_535
    + "Tue May  5 10:00:05 2026\n"
    + HEAD_535.format(u0=40, u1=38)
    + NO_PROCS_535
    + FOOT_535
).replace("~PAD~", " " * 89)  # nvidia-smi pads the line between its two boxes


def test_width_87_layout_with_two_dated_snapshots_and_processes(tmp_path: Path) -> None:
    path = write(tmp_path, "gpu.txt", TABLE_535)
    assert kind_of(path) == "nvidia_smi"
    result = ingest(path)
    acct = result.account
    assert acct.lines_parsed == acct.lines_total == TABLE_535.count("\n")
    gpus = result.table("gpu_snapshots").sort("snapshot", "gpu")
    assert gpus.select("snapshot", "gpu", "memory_used_mib", "utilization_pct").rows() == [
        (0, 0, 73514, 41),
        (0, 1, 42010, 39),
        (1, 0, 73514, 40),
        (1, 1, 42010, 38),
    ]
    assert (
        gpus["ts"].to_list()
        == [datetime(2026, 5, 5, 10, 0, 0)] * 2 + [datetime(2026, 5, 5, 10, 0, 5)] * 2
    )
    assert set(gpus["host"]) == {"gpu-node-3"}
    assert set(gpus["driver_version"]) == {"535.129.03"}
    procs = result.table("gpu_processes").sort("source_line")
    assert procs.select("snapshot", "gpu", "pid", "process_type", "used_mib").rows() == [
        (0, 0, 1032132, "C", 73500),
        (0, 1, 1032133, "C", 41996),
        (0, 1, 3494, "G", 4),
    ]
    # A name too wide for its column is kept as printed, with nvidia-smi's "...".
    assert procs["process_name"][1] == "...onda3/envs/serve/bin/python3.11"


TABLE_470 = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  Tesla V100-SXM2...  On   | 00000000:00:1E.0 Off |                    0 |
| N/A   37C    P0    38W / 300W |  15012MiB / 16160MiB |      0%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
~PAD~
+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0   N/A  N/A     16402      C   python3                         16901... |
+-----------------------------------------------------------------------------+
""".replace("~PAD~", " " * 79)


def test_width_79_layout_with_truncated_name_and_memory(tmp_path: Path) -> None:
    result = ingest(write(tmp_path, "smi-1778061600.log", TABLE_470))
    assert result.account.lines_unmatched == 0
    (gpu,) = result.table("gpu_snapshots").to_dicts()
    assert (gpu["name"], gpu["memory_used_mib"], gpu["memory_total_mib"]) == (
        "Tesla V100-SXM2...",
        15012,
        16160,
    )
    assert gpu["ts"] == datetime(2026, 5, 6, 10, 0, 0)  # from the file name: no date line
    assert "snapshot time from the file name" in result.account.notes
    (proc,) = result.table("gpu_processes").to_dicts()
    assert proc["pid"] == 16402 and proc["used_mib"] is None  # "16901..." is not a number
    assert any("truncated" in n for n in result.account.notes)


def test_mig_device_rows_are_counted_unmatched_not_dropped(tmp_path: Path) -> None:
    mig = (
        "+" + "-" * 87 + "+\n"
        "| MIG devices:" + " " * 74 + "|\n"
        "+------------------+--------------------------------+-----------+"
        "-----------------------+\n"
        "|  0    1   0   0  |              19MiB / 40192MiB  | 42      0 |"
        "  3   0    2    0    0 |\n"
    )
    text = "\n".join(TABLE_535.splitlines()[:18]) + "\n"
    result = ingest(write(tmp_path, "mig.txt", text + mig))
    assert result.account.lines_unmatched == 2
    assert result.account.balanced()
    assert sorted(t.first_line for t in result.account.templates) == [20, 22]


def test_watch_header_gives_host_and_time(tmp_path: Path) -> None:
    text = "Every 2.0s: nvidia-smi                     node-7: Wed May  6 22:25:35 2026\n\n"
    text += TABLE_470
    gpus = ingest(write(tmp_path, "watch.txt", text)).table("gpu_snapshots")
    assert gpus["host"].to_list() == ["node-7"]
    assert gpus["ts"].to_list() == [datetime(2026, 5, 6, 22, 25, 35)]


def test_name_time_reads_unix_times_and_compact_stamps() -> None:
    assert name_time("gpu-1795959281.txt") == datetime(2026, 11, 29, 13, 34, 41)
    assert name_time("nvsmi-20260506-222535.txt") == datetime(2026, 5, 6, 22, 25, 35)
    assert name_time("nvsmi-8xL40S-vllm-tp8-ep-4.nvsmi.txt") is None


CSV_LOOP = """\
$ nvidia-smi --query-gpu=timestamp,index,uuid,memory.total,memory.used,memory.free --format=csv -l 5
timestamp, index, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB]
2026/05/06 22:25:35.123, 0, GPU-aaaaaaaa-1111-2222-3333-44444444, 81920 MiB, 70000 MiB, 11420 MiB
2026/05/06 22:25:35.125, 1, GPU-bbbbbbbb-1111-2222-3333-44444444, 81920 MiB, 41000 MiB, 40420 MiB
2026/05/06 22:25:40.130, 0, GPU-aaaaaaaa-1111-2222-3333-44444444, 81920 MiB, 70010 MiB, 11410 MiB
2026/05/06 22:25:40.131, 1, GPU-bbbbbbbb-1111-2222-3333-44444444, 81920 MiB, 41000 MiB, 40420 MiB
$ nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,nounits
gpu_uuid, pid, process_name, used_gpu_memory [MiB]
GPU-bbbbbbbb-1111-2222-3333-44444444, 4242, VLLM::Worker_TP1, 40988
"""


def test_csv_loop_with_timestamps_and_apps_matched_by_uuid(tmp_path: Path) -> None:
    result = ingest(write(tmp_path, "loop.csv", CSV_LOOP))
    assert result.account.lines_unmatched == 0
    gpus = result.table("gpu_snapshots").sort("snapshot", "gpu")
    assert gpus.select("snapshot", "gpu", "memory_used_mib").rows() == [
        (0, 0, 70000),
        (0, 1, 41000),
        (1, 0, 70010),
        (1, 1, 41000),
    ]
    assert gpus["ts"][2] == datetime(2026, 5, 6, 22, 25, 40)
    (proc,) = result.table("gpu_processes").to_dicts()
    assert (proc["gpu"], proc["pid"], proc["used_mib"]) == (1, 4242, 40988)


def test_headerless_csv_takes_its_columns_from_the_command_line(tmp_path: Path) -> None:
    text = (
        "$ nvidia-smi --query-gpu=utilization.gpu,index,memory.total,memory.used "
        "--format=csv,noheader\n"
        "9 %, 0, 81920 MiB, 55760 MiB\n"
    )
    result = ingest(write(tmp_path, "q.txt", text))
    (gpu,) = result.table("gpu_snapshots").to_dicts()
    assert (gpu["utilization_pct"], gpu["gpu"], gpu["memory_used_mib"]) == (9, 0, 55760)
    assert any("command line" in n for n in result.account.notes)


def test_headerless_nounits_csv_in_the_documented_order_only_when_unambiguous(
    tmp_path: Path,
) -> None:
    text = (
        "0, NVIDIA H100 80GB HBM3, 81559, 73001, 7985, 97\n"
        "1, NVIDIA H100 80GB HBM3, 81559, 41000, 39986, 12\n"
    )
    path = write(tmp_path, "smi.txt", text)
    assert kind_of(path) == "nvidia_smi"
    result = ingest(path)
    gpus = result.table("gpu_snapshots")
    assert gpus.select("gpu", "memory_total_mib", "memory_used_mib", "memory_free_mib").rows() == [
        (0, 81559, 73001, 7985),
        (1, 81559, 41000, 39986),
    ]
    assert any("documented order" in n for n in result.account.notes)
    # Two bare numbers could be used,total or total,used or free,total: not guessed.
    ambiguous = ingest(write(tmp_path, "two.txt", "73001, 81559\n"), kind="nvidia_smi")
    assert ambiguous.account.lines_unmatched == 1
    assert "gpu_snapshots" not in ambiguous.tables
    # Memory that does not add up is not the documented order either.
    wrong = ingest(write(tmp_path, "bad.txt", "0, GPU, 100, 90, 90, 5\n"), kind="nvidia_smi")
    assert wrong.account.lines_unmatched == 1


def test_not_supported_values_are_null(tmp_path: Path) -> None:
    text = (
        "index, name, memory.total [MiB], memory.used [MiB], memory.reserved [MiB], "
        "utilization.gpu [%]\n"
        "0, NVIDIA A10G, 23028 MiB, 3 MiB, [Not Supported], [N/A]\n"
    )
    (gpu,) = ingest(write(tmp_path, "na.csv", text)).table("gpu_snapshots").to_dicts()
    assert gpu["memory_reserved_mib"] is None and gpu["utilization_pct"] is None
    assert gpu["memory_total_mib"] == 23028


def test_a_vllm_log_quoting_a_table_stays_a_log(tmp_path: Path) -> None:
    log = (
        "(APIServer pid=1) INFO 11-29 13:34:06 [api_utils.py:347] vLLM API server version 0.32.0\n"
        + TABLE_470
    )
    assert kind_of(write(tmp_path, "server.log", log)) == "vllm_log"


def test_snapshot_series_across_files(tmp_path: Path) -> None:
    frames = []
    for stamp, used in (("1778061600", 1000), ("1778061660", 9000)):
        text = TABLE_470.replace("15012MiB", f"{used:5d}MiB")
        frames.append(ingest(write(tmp_path, f"gpu-{stamp}.txt", text)).table("gpu_snapshots"))
    series = pl.concat(frames).sort("ts")
    assert series["memory_used_mib"].to_list() == [1000, 9000]
    assert series["ts"].diff().dt.total_seconds().to_list()[1] == 60
