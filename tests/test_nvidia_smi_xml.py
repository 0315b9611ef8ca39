"""nvidia-smi's XML (`nvidia-smi -q -x`): memory per GPU and process, and broken documents."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from tests.ingest_helpers import ingest, kind_of, write

# `nvidia-smi -q -x` (two documents, as `-l` appends them). SYNTHETIC: no real XML capture
# was collected (realdata/issues/INDEX.md, "Not found"); element names and nesting follow
# vllm-formats.md §5.2. bar1_memory_usage has the same child names as fb_memory_usage and
# different values, so reading the wrong parent would show.
XML_DOC = """\
<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
\t<timestamp>Wed May  6 22:25:{sec} 2026</timestamp>
\t<driver_version>550.54.15</driver_version>
\t<cuda_version>12.4</cuda_version>
\t<attached_gpus>2</attached_gpus>
\t<gpu id="00000000:01:00.0">
\t\t<product_name>NVIDIA GeForce RTX 4090</product_name>
\t\t<uuid>GPU-11111111-2222-3333-4444-555555555555</uuid>
\t\t<minor_number>0</minor_number>
\t\t<fb_memory_usage>
\t\t\t<total>24564 MiB</total>
\t\t\t<reserved>346 MiB</reserved>
\t\t\t<used>{used} MiB</used>
\t\t\t<free>{free} MiB</free>
\t\t</fb_memory_usage>
\t\t<bar1_memory_usage>
\t\t\t<total>256 MiB</total>
\t\t\t<used>5 MiB</used>
\t\t\t<free>251 MiB</free>
\t\t</bar1_memory_usage>
\t\t<utilization>
\t\t\t<gpu_util>25 %</gpu_util>
\t\t\t<memory_util>30 %</memory_util>
\t\t</utilization>
\t\t<processes>
\t\t\t<process_info>
\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>
\t\t\t\t<compute_instance_id>N/A</compute_instance_id>
\t\t\t\t<pid>408</pid>
\t\t\t\t<type>C</type>
\t\t\t\t<process_name>VLLM::EngineCore</process_name>
\t\t\t\t<used_memory>21840 MiB</used_memory>
\t\t\t</process_info>
\t\t</processes>
\t</gpu>
\t<gpu id="00000000:02:00.0">
\t\t<product_name>NVIDIA GeForce RTX 4090</product_name>
\t\t<uuid>GPU-66666666-2222-3333-4444-555555555555</uuid>
\t\t<minor_number>1</minor_number>
\t\t<fb_memory_usage>
\t\t\t<total>24564 MiB</total>
\t\t\t<reserved>346 MiB</reserved>
\t\t\t<used>1 MiB</used>
\t\t\t<free>24217 MiB</free>
\t\t</fb_memory_usage>
\t\t<bar1_memory_usage>
\t\t\t<total>256 MiB</total>
\t\t\t<used>1 MiB</used>
\t\t\t<free>255 MiB</free>
\t\t</bar1_memory_usage>
\t\t<utilization>
\t\t\t<gpu_util>0 %</gpu_util>
\t\t\t<memory_util>0 %</memory_util>
\t\t</utilization>
\t\t<processes>
\t\t</processes>
\t</gpu>
</nvidia_smi_log>
"""


def test_xml_reads_fb_memory_not_bar1_per_gpu_and_process(tmp_path: Path) -> None:
    text = XML_DOC.format(sec="35", used=22186, free=2032) + XML_DOC.format(
        sec="40", used=22190, free=2028
    )
    path = write(tmp_path, "smi.xml", text)
    assert kind_of(path) == "nvidia_smi"
    result = ingest(path)
    assert result.account.lines_parsed == result.account.lines_total == text.count("\n")
    gpus = result.table("gpu_snapshots").sort("snapshot", "gpu")
    assert gpus.select(
        "snapshot", "gpu", "memory_total_mib", "memory_used_mib", "memory_free_mib"
    ).rows() == [
        (0, 0, 24564, 22186, 2032),
        (0, 1, 24564, 1, 24217),
        (1, 0, 24564, 22190, 2028),
        (1, 1, 24564, 1, 24217),
    ]
    assert set(gpus["memory_reserved_mib"]) == {346}
    assert gpus["ts"].to_list()[::2] == [
        datetime(2026, 5, 6, 22, 25, 35),
        datetime(2026, 5, 6, 22, 25, 40),
    ]
    assert gpus["uuid"][1] == "GPU-66666666-2222-3333-4444-555555555555"
    assert gpus["source_line"][0] == 8  # the <gpu id=...> line
    assert set(gpus["driver_version"]) == {"550.54.15"}
    procs = result.table("gpu_processes").sort("snapshot")
    assert procs.select("snapshot", "gpu", "pid", "process_name", "used_mib").rows() == [
        (0, 0, 408, "VLLM::EngineCore", 21840),
        (1, 0, 408, "VLLM::EngineCore", 21840),
    ]


def test_broken_xml_is_a_problem_and_unmatched(tmp_path: Path) -> None:
    text = XML_DOC.format(sec="35", used=1, free=2)[:-40]
    result = ingest(write(tmp_path, "cut.xml", text))
    assert result.account.lines_unmatched == result.account.lines_total
    assert result.problems and "XML not readable" in result.problems[0].message
