"""Tables filled from nvidia-smi (table, CSV, XML) and dcgm-exporter scrapes."""

from __future__ import annotations

from kvdiag.analyzer.schema.base import PROVENANCE, Table, cols

GPU_TABLES: tuple[Table, ...] = (
    Table(
        "gpu_snapshots",
        "Per-GPU memory at one moment (a snapshot series when there are several).",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica or host the GPU belongs to"),
            ("host", "VARCHAR", "hostname when the source gives one"),
            ("ts", "TIMESTAMP", "snapshot time: UTC when the source gives a zone, else as printed"),
            ("gpu", "INTEGER", "device index"),
            ("uuid", "VARCHAR", "GPU UUID"),
            ("name", "VARCHAR", "product name"),
            ("memory_total_mib", "DOUBLE", "total framebuffer memory, MiB"),
            ("memory_used_mib", "DOUBLE", "used, MiB (NVML v2: includes reserved)"),
            ("memory_free_mib", "DOUBLE", "free, MiB"),
            ("memory_reserved_mib", "DOUBLE", "reserved by the driver, MiB"),
            ("utilization_pct", "DOUBLE", "GPU utilization, percent"),
            ("source_kind", "VARCHAR", "nvsmi_table | nvsmi_csv | nvsmi_xml | dcgm"),
            ("snapshot", "INTEGER", "0-based snapshot number in its file (orders untimed ones)"),
            ("bus_id", "VARCHAR", "PCI bus id, e.g. 00000000:01:00.0"),
            ("driver_version", "VARCHAR", "driver (KMD) version the snapshot's header states"),
        ),
    ),
    Table(
        "gpu_processes",
        "Processes holding GPU memory at one moment.",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica or host"),
            ("ts", "TIMESTAMP", "snapshot time: UTC when the source gives a zone, else as printed"),
            ("gpu", "INTEGER", "device index (NULL when only the UUID is given)"),
            ("uuid", "VARCHAR", "GPU UUID"),
            ("pid", "BIGINT", "process id"),
            ("process_name", "VARCHAR", "name as printed, e.g. VLLM::Worker_TP0_EP0"),
            ("used_mib", "DOUBLE", "memory the process holds, MiB (NULL: N/A or truncated)"),
            ("process_type", "VARCHAR", "C (compute) | G (graphics) | C+G | M ..., as printed"),
            ("snapshot", "INTEGER", "0-based snapshot number within its file"),
        ),
    ),
)
