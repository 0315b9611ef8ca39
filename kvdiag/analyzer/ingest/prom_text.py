"""Prometheus text exposition (0.0.4 and OpenMetrics): one snapshot or a series of scrapes.

A folder of `<unix_ts>.prom` files is read as one scrape series (the time comes from the
file name). Many small files are concatenated into one polars batch, so the cost per
scrape is a few microseconds of Python, not a parser loop per line. Every line is
accounted for: blank and `#` lines are metadata, sample lines are parsed, anything else is
unmatched. Only samples of metrics in the alias table are stored; the rest are counted.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from kvdiag.analyzer.ingest.aliases import load_aliases
from kvdiag.analyzer.ingest.base import (
    Emit,
    IngestContext,
    Ingester,
    InputUnit,
    TableBatch,
    Tally,
    template_expr,
)
from kvdiag.analyzer.ingest.lines import open_binary
from kvdiag.analyzer.model import InputProblem, UnmatchedTemplate

SAMPLE_RE = (
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r'(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?'
    r"[ \t]+(?P<value>[^ \t#]+)"
    r"(?:[ \t]+(?P<sts>-?[0-9][0-9.eE+-]*))?"
    r"[ \t]*(?:#.*)?$"
)
_LABEL_PAIR = r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"'
_SCRAPE_NAME = re.compile(r"^(\d{9,11}(?:\.\d+)?)\.(?:prom|txt|metrics)$")
_BATCH_BYTES = 32 << 20


def scrape_time_from_name(name: str) -> datetime | None:
    """`1795959281.911.prom` -> that instant (UTC), else None."""
    m = _SCRAPE_NAME.match(name)
    return datetime.fromtimestamp(float(m.group(1)), tz=UTC).replace(tzinfo=None) if m else None


def _label(name: str) -> pl.Expr:
    return pl.col("labels").str.extract(rf'(?:^|,)\s*{name}\s*=\s*"((?:[^"\\]|\\.)*)"', 1)


def _labels_json() -> pl.Expr:
    pairs = (
        pl.col("labels")
        .fill_null("")
        .str.replace(r",\s*$", "")
        .str.replace_all(_LABEL_PAIR, r'"${1}":"${2}"')
    )
    return pl.concat_str([pl.lit("{"), pairs, pl.lit("}")])


def _read_files(paths: list[Path]) -> tuple[pl.DataFrame, list[str]]:
    """One frame (f, line_no, text) for several files; per-file problems."""
    chunks: list[bytes] = []
    counts: list[int] = []
    problems: list[str] = []
    for path in paths:
        try:
            with open_binary(path) as fh:
                data = fh.read()
        except (OSError, EOFError) as exc:
            data = b""
            problems.append(f"{path.name}: unreadable: {exc}")
        if data and not data.endswith(b"\n"):
            data += b"\n"
        chunks.append(data)
        counts.append(data.count(b"\n"))
    blob = b"".join(chunks).replace(b"\x1f", b" ")
    if not blob:
        return pl.DataFrame(
            schema={"f": pl.Int64, "line_no": pl.Int64, "text": pl.String}
        ), problems
    text = pl.read_csv(
        io.BytesIO(blob),
        has_header=False,
        separator="\x1f",
        quote_char=None,
        new_columns=["text"],
        schema={"text": pl.String},
        encoding="utf8-lossy",
    )["text"].fill_null("")
    idx = pl.DataFrame({"f": list(range(len(paths))), "c": counts}).select(
        pl.col("f").repeat_by("c").explode()
    )["f"]
    frame = pl.DataFrame({"f": idx.cast(pl.Int64), "text": text.str.strip_chars_end("\r")})
    frame = frame.with_columns(
        (pl.int_range(pl.len()).over("f") + 1).cast(pl.Int64).alias("line_no")
    )
    return frame, problems


class PromTextIngester(Ingester):
    """Reads Prometheus text exposition: `/metrics` snapshots and scrape series."""

    kind = "prom_text"
    description = "Prometheus /metrics text (a snapshot, or a folder of <unix_ts>.prom scrapes)"
    tables = ("metric_samples", "config")

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        if "# TYPE " in head or "# HELP " in head:
            return 85
        if re.search(
            r"(?m)^(?:vllm|sglang|DCGM_FI_\w+|ray_vllm)[:\w]*(?:\{[^}]*\})? [-+\d.eEnaNIf]+$", head
        ):
            return 70
        return 0

    @classmethod
    def series_key(cls, rel: str) -> str | None:
        folder, _, name = rel.rpartition("/")
        return folder if _SCRAPE_NAME.match(name) else None

    @classmethod
    def time_hint(cls, rel: str) -> datetime | None:
        return scrape_time_from_name(rel.rpartition("/")[2])

    def ingest(self, unit: InputUnit, ctx: IngestContext) -> Iterator[Emit]:
        lookup = load_aliases().lookup_map()
        rewrites = load_aliases().prefix_rewrites
        names = pl.DataFrame(
            {
                "name": list(lookup),
                "metric": [v[0] for v in lookup.values()],
                "suffix": [v[1] for v in lookup.values()],
            }
        )
        tally = Tally()
        templates: dict[str, list[int | str]] = {}
        seen_config: set[tuple[str, str, str]] = set()
        order = sorted(range(len(unit.files)), key=lambda i: unit.rels[i])
        for group in _batches(unit, order):
            frame, problems = _read_files([unit.files[i] for i in group])
            for p in problems:
                yield InputProblem(unit.rel, None, p)
            rels = pl.Series([unit.rels[i] for i in group])
            times = pl.Series(
                [scrape_time_from_name(unit.files[i].name) for i in group], dtype=pl.Datetime("us")
            )
            frame = _attach(frame, rels, times)
            samples, config = self._parse(frame, names, rewrites, unit, tally, templates)
            if samples.height:
                tally.records += samples.height
                yield TableBatch("metric_samples", samples)
            config = _new_config(config, seen_config)
            if config.height:
                yield TableBatch("config", config)
        if unit.files and scrape_time_from_name(unit.files[0].name) is None:
            tally.notes.append("no scrape time in the file name or samples: series times unknown")
        ranked = sorted(templates.items(), key=lambda kv: -int(kv[1][0]))[:20]
        yield tally.account(
            unit.rel,
            tuple(UnmatchedTemplate(t, int(c), int(ln), str(ex)) for t, (c, ln, ex) in ranked),
        )

    def _parse(
        self,
        frame: pl.DataFrame,
        names: pl.DataFrame,
        rewrites: tuple[tuple[str, str], ...],
        unit: InputUnit,
        tally: Tally,
        templates: dict[str, list[int | str]],
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        is_meta = pl.col("text").str.strip_chars().eq("") | pl.col("text").str.starts_with("#")
        frame = frame.with_columns(
            is_meta.alias("meta"), pl.col("text").str.contains(SAMPLE_RE).alias("sample")
        )
        tally.total += frame.height
        tally.parsed += int(frame.select((pl.col("meta") | pl.col("sample")).sum()).item())
        bad = frame.filter(~pl.col("meta") & ~pl.col("sample"))
        tally.unmatched += bad.height
        _add_templates(bad, templates)
        samples = frame.filter(pl.col("sample") & ~pl.col("meta"))
        samples = samples.with_columns(
            pl.col("text").str.extract_groups(SAMPLE_RE).alias("g")
        ).unnest("g")
        name = pl.col("name")
        for old, new in rewrites:
            name = (
                pl.when(name.str.starts_with(old))
                .then(pl.lit(new) + name.str.slice(len(old)))
                .otherwise(name)
            )
        samples = samples.with_columns(name.alias("name")).join(names, on="name", how="inner")
        instance = _label("instance")
        out = samples.select(
            pl.col("source_path"),
            pl.col("line_no").alias("source_line"),
            pl.col("text").str.slice(0, 4096).alias("raw"),
            pl.coalesce(instance, pl.lit(unit.replica)).alias("replica"),
            pl.coalesce(
                pl.from_epoch(
                    pl.col("sts").cast(pl.Float64, strict=False).cast(pl.Int64, strict=False), "ms"
                ),
                pl.col("scrape_ts"),
            ).alias("ts"),
            pl.col("metric"),
            pl.col("name"),
            pl.col("suffix"),
            pl.coalesce(_label("engine"), _label("tp_rank")).alias("engine"),
            _label("model_name").alias("model_name"),
            _label("le").cast(pl.Float64, strict=False).alias("le"),
            _label("reason").alias("reason"),
            _labels_json().alias("labels"),
            pl.col("value").cast(pl.Float64, strict=False).alias("value"),
        )
        return out, _config_rows(out)


def _attach(frame: pl.DataFrame, rels: pl.Series, times: pl.Series) -> pl.DataFrame:
    """Add each line's file path and scrape time, by file index."""
    files = pl.DataFrame({"f": list(range(rels.len())), "source_path": rels, "scrape_ts": times})
    return frame.join(
        files.with_columns(pl.col("f").cast(pl.Int64)), on="f", how="left", maintain_order="left"
    )


def _batches(unit: InputUnit, order: list[int]) -> Iterator[list[int]]:
    group: list[int] = []
    size = 0
    for i in order:
        group.append(i)
        size += unit.files[i].stat().st_size
        if size >= _BATCH_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


def _add_templates(bad: pl.DataFrame, templates: dict[str, list[int | str]]) -> None:
    if bad.is_empty():
        return
    grouped = (
        bad.with_columns(template_expr("text").alias("t"))
        .group_by("t")
        .agg(pl.len().alias("n"), pl.col("line_no").first(), pl.col("text").first())
    )
    for t, n, line, text in grouped.iter_rows():
        row = templates.setdefault(t, [0, line, text[:300]])
        row[0] = int(row[0]) + n


def _config_rows(samples: pl.DataFrame) -> pl.DataFrame:
    """cache_config_info labels become config rows (key, value) with provenance."""
    info = samples.filter(pl.col("metric") == "cache_config_info")
    if info.is_empty():
        return pl.DataFrame()
    pairs = info.select(
        "source_path",
        "source_line",
        "raw",
        "replica",
        pl.col("raw").str.extract_all(_LABEL_PAIR).alias("pair"),
    ).explode("pair")
    return pairs.select(
        "source_path",
        "source_line",
        "raw",
        "replica",
        pl.col("pair").str.extract(r"^([a-zA-Z_][a-zA-Z0-9_]*)", 1).alias("key"),
        pl.col("pair").str.extract(r'="(.*)"$', 1).alias("value"),
        pl.lit("metrics").alias("origin"),
    ).filter(pl.col("key") != "engine")


def _new_config(config: pl.DataFrame, seen: set[tuple[str, str, str]]) -> pl.DataFrame:
    """Keep the first sighting of each (replica, key, value); scrapes repeat the same info."""
    if config.is_empty():
        return config
    first = config.unique(subset=["replica", "key", "value"], keep="first", maintain_order=True)
    keep = [
        (r, k, v) not in seen for r, k, v in first.select("replica", "key", "value").iter_rows()
    ]
    first = first.filter(pl.Series(keep))
    seen.update(first.select("replica", "key", "value").iter_rows())
    return first
