"""Tables about the inputs themselves and the engine configuration."""

from __future__ import annotations

from kvdiag.analyzer.schema.base import PROVENANCE, Table, cols

CORE_TABLES: tuple[Table, ...] = (
    Table(
        "inputs",
        "One row per file of the incident folder and what became of it.",
        cols(
            ("path", "VARCHAR", "file, relative to the incident folder"),
            ("kind", "VARCHAR", "ingester that read it, or 'unknown'"),
            ("status", "VARCHAR", "used | skipped | unrecognised | refused"),
            ("reason", "VARCHAR", "why, in words"),
            ("size_bytes", "BIGINT", "file size"),
            ("lines_total", "BIGINT", "lines in the file"),
            ("lines_parsed", "BIGINT", "lines matched by a declared format"),
            ("lines_unmatched", "BIGINT", "lines no format matched"),
            ("lines_undecodable", "BIGINT", "lines that were not valid text"),
            ("records", "BIGINT", "events or samples extracted"),
        ),
    ),
    Table(
        "unmatched_templates",
        "Unmatched lines grouped by shape (digits and ids masked), per file.",
        cols(
            ("source_path", "VARCHAR", "file"),
            ("template", "VARCHAR", "the masked shape"),
            ("count", "BIGINT", "lines with this shape"),
            ("first_line", "BIGINT", "first line number with this shape"),
            ("example", "VARCHAR", "that first line"),
        ),
    ),
    Table(
        "config",
        "Engine configuration from every source (log, metrics, launch flags), one value per "
        "row; a log file's repeated statement (a restart's) once, at its first line.",
        PROVENANCE
        + cols(
            ("replica", "VARCHAR", "replica"),
            ("key", "VARCHAR", "canonical key, e.g. gpu_memory_utilization, max_model_len"),
            ("value", "VARCHAR", "value as text (Python-style: True, None, 0.9)"),
            ("origin", "VARCHAR", "log | metrics | cmdline | default"),
            ("engine", "VARCHAR", "vllm | sglang | tgi"),
        ),
    ),
    Table(
        "line_blocks",
        "Where a file's lines lie, block by block, so that a line whose text a table left "
        "out (raw NULL, read by reference) can be read again from the file. Written only "
        "while the database is temporary: a database kept with --db keeps every line's text.",
        cols(
            ("source_path", "VARCHAR", "file, relative to the incident folder"),
            ("file_path", "VARCHAR", "where the file was read (absolute)"),
            ("first_line", "BIGINT", "1-based number of the block's first line"),
            ("lines", "BIGINT", "lines in the block"),
            ("byte_offset", "BIGINT", "where the block starts in the file"),
            ("byte_length", "BIGINT", "the block's length in bytes"),
        ),
    ),
    Table(
        "implausible_values",
        "Values that cannot be true (out of their plausible range, NaN, infinite): each row "
        "was moved here from its table before facts and rules ran (plausible.toml).",
        PROVENANCE
        + cols(
            ("table_name", "VARCHAR", "table the row was removed from"),
            (
                "column_name",
                "VARCHAR",
                "the column, the metric (metric_samples) or the key (config)",
            ),
            ("value", "DOUBLE", "the value as read"),
            ("low", "DOUBLE", "lowest plausible value"),
            ("high", "DOUBLE", "highest plausible value"),
        ),
    ),
    Table(
        "input_problems",
        "Problems with inputs that the analysis worked around (also in the report).",
        cols(
            ("path", "VARCHAR", "file, relative to the incident folder"),
            ("line", "BIGINT", "1-based line, when the problem has one"),
            ("message", "VARCHAR", "what is wrong"),
        ),
    ),
)
