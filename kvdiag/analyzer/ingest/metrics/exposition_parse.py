"""Vectorised parsing of Prometheus text exposition (0.0.4) and OpenMetrics lines.

The work is split by cost. Every line gets two cheap DFA tests (is it a valid sample line;
could it name a known metric), which account for every line. Only lines of known metrics
are split into head (`name{labels}`) and tail (value, timestamp, exemplar); the heads
repeat scrape after scrape, so the label parsing, unescaping and alias lookup run once
per distinct head, and join back. No Python runs per line.

Grammar accepted (laxer than the Go parser where that costs nothing): a metric name
`[a-zA-Z_:][a-zA-Z0-9_:]*`; an optional label set of `name="value"` pairs separated by
commas (a trailing comma and blanks allowed), values escaping `\\`, `\"` and `\n` (another
escaped character is kept as written); blanks; a float value (`NaN`, `+Inf`, `-Inf`
included); an optional timestamp; an optional OpenMetrics exemplar (` # {...} v [ts]`),
which is ignored. Lines starting with `#` are comments (HELP, TYPE, UNIT, EOF, markers).
UTF-8 quoted metric names (`{"my.metric"}`) are not accepted and count as unmatched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from kvdiag.analyzer.ingest.metrics.scrape_time import (
    BARE_TIME_RE,
    EOF_RE,
    MARKER_RE,
    epoch_to_utc,
    text_to_utc,
)
from kvdiag.analyzer.ingest.rows import MAX_RAW
from kvdiag.analyzer.schema.aliases import AliasTable
from kvdiag.analyzer.schema.sample_tail import TAIL, cut_heads

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\]|\\.)*"'
_LABELS = rf"\{{[ \t]*(?:{_LABEL}(?:[ \t]*,[ \t]*{_LABEL})*[ \t]*,?[ \t]*)?\}}"
_FLOAT = r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:nan|inf(?:inity)?))"
_TS = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
SAMPLE_RE = rf"^{_NAME}(?:{_LABELS})?[ \t]+{_FLOAT}(?:[ \t]+{_TS})?(?:[ \t]+#.*)?[ \t]*$"
HEAD_RE = rf"^{_NAME}(?:{_LABELS})?"
# How client libraries write a sample: single spaces, no exemplar, nothing trailing.
CANONICAL_RE = rf"^{_NAME}(?:{_LABELS})? {_FLOAT}(?: {_TS})?$"
_TAIL_RE = r"^[ \t]+([^ \t]+)(?:[ \t]+([^ \t#]+))?"
LABEL_PAIR = r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"'

KIND = pl.Enum(["comment", "mark", "sample", "known", "blank", "bare", "bad", "garbled"])

# Label columns pulled out of the label set for every stored sample.
LABEL_COLUMNS = ("instance", "engine", "tp_rank", "model_name", "name", "le", "reason")
_PROM_ESCAPES = (["\\\\", '\\"', "\\n"], ["\\", '"', "\n"])
_JSON_FROM = ["\\", '"', *(chr(c) for c in range(32))]
_JSON_TO = ["\\\\", '\\"', *(f"\\u{c:04x}" for c in range(32))]


# Exposition lines (`# HELP`/`# TYPE`, `name{...} value`, `name value`). A label value may
# quote anything, so other sniffers look past them; a shell prompt (`# nvidia-smi ...`) or
# a command (`sudo nvidia-smi ...`, `vllm serve m`) is not one of them.
_EXPOSITION_LINE = re.compile(
    r"(?m)^(?:#[ \t]*(?:HELP|TYPE|UNIT|EOF)\b.*"
    r"|[a-zA-Z_:][\w:]*(?:\{.*|[ \t]+[-+]?(?:\d|Inf|inf|NaN|nan)\S*(?:[ \t].*)?))$"
)


def without_exposition_lines(text: str) -> str:
    """`text` with its Prometheus exposition lines blanked (for other formats' sniffing)."""
    return _EXPOSITION_LINE.sub("", text)


@dataclass(frozen=True, slots=True)
class ParsedLines:
    """One batch of exposition lines, parsed and accounted for."""

    # known metrics: row, value, sample_ts, head_id (a row of `heads`), raw and tail (the
    # line cut after its head, as sample_tail.py says)
    samples: pl.DataFrame
    heads: pl.DataFrame  # parse_heads' first frame: what names each sample's series, once
    pairs: pl.DataFrame  # head, key, value: the labels of those samples
    sample_rows: pl.Series  # row of every valid sample line (known metric or not)
    boundaries: pl.DataFrame  # row, ts, text: marker lines, and the line after each # EOF
    unmatched: pl.DataFrame  # row, text: lines no shape accepts
    parsed: int
    undecodable: int


def parse_lines(lines: pl.DataFrame, aliases: AliasTable) -> ParsedLines:
    """Classify every line of `lines` (row, text; row = position, as read_batch makes it)
    and split the known-metric samples.

    Scrapes repeat themselves: most lines of a series (HELP, TYPE, unchanged samples)
    occur in many files. Lines are therefore classified, split and resolved once per
    distinct text, and only the kind (a small integer) travels back to every row.
    """
    # Lines are keyed by a 64-bit hash of their text, which is cheaper to group and join
    # than the text itself; two distinct lines of a batch sharing a hash is a ~1e-8 event
    # even at a million distinct lines.
    keyed = lines.with_columns(pl.col("text").hash().alias("_h"))
    distinct = keyed.unique(subset="_h").select("_h", "text")
    classified, known, heads, pairs = _resolve(_classify(distinct, aliases), aliases)
    kinds = keyed.select("row", "_h").join(
        classified.select("_h", "kind"), on="_h", how="left", maintain_order="left"
    )
    kind = pl.col("kind")
    # A sample row carries numbers only; what names its series is in `heads`, once per head
    # (a row of each series' strings per sample was two thirds of a batch's memory).
    samples = kinds.filter(kind == "known").join(
        known.select("_h", "value", "sample_ts", "head_id", "raw", TAIL),
        on="_h",
        maintain_order="left",
    )
    unmatched = _with_text(kinds.filter(kind.is_in(["bad", "garbled"])), lines)
    return ParsedLines(
        samples=samples.drop("_h", "kind"),
        heads=heads,
        pairs=pairs,
        sample_rows=kinds.filter(kind.is_in(["known", "sample"]))["row"],
        boundaries=_boundaries(_with_text(kinds.filter(kind.is_in(["mark", "bare"])), lines)),
        unmatched=unmatched.filter(kind == "bad").select("row", "text"),
        parsed=lines.height - unmatched.height,
        undecodable=unmatched.filter(kind == "garbled").height,
    )


def _resolve(
    classified: pl.DataFrame, aliases: AliasTable
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Resolve the heads of known lines: (classified, known lines with their head_id, the
    heads as parse_heads makes them, label pairs).

    A line the cheap prefilter let through but the alias table does not know is a valid
    sample of another metric and becomes kind `sample`.
    """
    known = classified.filter(pl.col("kind") == "known").drop("kind")
    heads, pairs = parse_heads(known["head"], aliases)
    known = known.join(heads.select("head", "head_id"), on="head", how="left")
    other = known.filter(pl.col("head_id").is_null()).select("_h", pl.lit(True).alias("_other"))
    classified = classified.join(other, on="_h", how="left").with_columns(
        pl.when(pl.col("_other")).then(pl.lit("sample", KIND)).otherwise("kind").alias("kind")
    )
    # The text a sample's row keeps, cut once per distinct line rather than per sample: at
    # most MAX_RAW characters of the line, without its head (sample_tail.py).
    known = known.filter(pl.col("head_id").is_not_null()).with_columns(
        pl.col("text").str.slice(0, MAX_RAW).alias("raw")
    )
    return classified, cut_heads(known), heads, pairs


def _with_text(rows: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Attach each row's text (rows of a batch are numbered from 0 in order)."""
    return rows.with_columns(lines["text"].gather(rows["row"]).alias("text"))


def _classify(distinct: pl.DataFrame, aliases: AliasTable) -> pl.DataFrame:
    """Kind of each distinct line, and head, value and timestamp of known-metric samples.

    kind: comment | mark (marker or # EOF) | sample (valid, unknown metric) | known |
    blank | bare (a line that is only a time) | bad | garbled (bad, with invalid UTF-8).
    """
    text = pl.col("text")
    # Cheap tests over every line (polars runs them in parallel); the patterns fail at
    # the first character of the lines they are not about.
    flags = distinct.with_columns(
        text.str.starts_with("#").alias("comment"),
        text.str.contains(CANONICAL_RE).alias("canonical"),
        text.str.contains(aliases.line_prefilter()).alias("known"),
    )
    # Nearly every line is a comment or a sample written the canonical way; the costlier
    # tests run on the lines they can tell apart, not on all (polars evaluates every branch
    # of a when/then for every row).
    comment, canonical = pl.col("comment"), pl.col("canonical")
    flags = pl.concat(
        [
            flags.filter(comment).with_columns(_comment_kind().alias("kind")),
            flags.filter(~comment & canonical).with_columns(_sample_kind().alias("kind")),
            flags.filter(~comment & ~canonical).with_columns(_other_kind().alias("kind")),
        ]
    )
    known = flags.filter(pl.col("kind") == "known")
    split = pl.concat(
        [
            _split_canonical(known.filter(pl.col("canonical"))),
            _split_general(known.filter(~pl.col("canonical"))),
        ]
    )
    return flags.drop("comment", "canonical", "known").join(split, on="text", how="left")


def _comment_kind() -> pl.Expr:
    """A comment line: a scrape marker (or `# EOF`), or any other comment."""
    marked = pl.col("text").str.contains(f"{MARKER_RE}|{EOF_RE}")
    return pl.when(marked).then(pl.lit("mark", KIND)).otherwise(pl.lit("comment", KIND))


def _sample_kind() -> pl.Expr:
    """A valid sample line: of a known metric or another."""
    return pl.when(pl.col("known")).then(pl.lit("known", KIND)).otherwise(pl.lit("sample", KIND))


def _other_kind() -> pl.Expr:
    """A line neither a comment nor a canonical sample: valid by the full grammar, or not."""
    text = pl.col("text")
    return (
        pl.when(text.str.contains(SAMPLE_RE))
        .then(_sample_kind())
        .when(text.str.contains(r"^[ \t]*$"))
        .then(pl.lit("blank", KIND))
        .when(text.str.contains(BARE_TIME_RE))
        .then(pl.lit("bare", KIND))
        .when(text.str.contains("\ufffd", literal=True))
        .then(pl.lit("garbled", KIND))
        .otherwise(pl.lit("bad", KIND))
    )


def _boundaries(marks: pl.DataFrame) -> pl.DataFrame:
    """Scrape starts inside a file: marker lines (with their time) and lines after # EOF."""
    is_eof = pl.col("text").str.contains(EOF_RE)
    markers = marks.filter(~is_eof).select(
        "row",
        text_to_utc(
            pl.coalesce(
                pl.col("text").str.extract(MARKER_RE, 1),
                pl.col("text").str.extract(BARE_TIME_RE, 1),
            )
        ).alias("ts"),
        "text",
    )
    after_eof = marks.filter(is_eof).select(
        (pl.col("row") + 1).alias("row"),
        pl.lit(None, pl.Datetime("us")).alias("ts"),
        pl.lit(None, pl.String).alias("text"),
    )
    return pl.concat([markers, after_eof]).sort("row")


def _split_canonical(lines: pl.DataFrame) -> pl.DataFrame:
    """head, value and timestamp of lines written `head value[ ts]` with single spaces.

    Splitting on spaces is safe from the right only: label values may hold spaces, values
    and timestamps may not. The token before the value ends the head, so when it ends
    with `}` (labels) or is the first token (no labels), there is no timestamp.
    """
    tokens = pl.col("text").str.split(" ")
    frame = lines.select("text", tokens.alias("_tok")).with_columns(
        pl.col("_tok").list.get(-1, null_on_oob=True).alias("_last"),
        pl.col("_tok").list.get(-2, null_on_oob=True).alias("_prev"),
        pl.col("_tok").list.len().alias("_n"),
    )
    has_ts = (pl.col("_n") >= 3) & ~pl.col("_prev").str.ends_with("}")
    tail_len = (
        pl.col("_last").str.len_chars()
        + 1
        + pl.when(has_ts).then(pl.col("_prev").str.len_chars() + 1).otherwise(0)
    )
    return frame.select(
        "text",
        pl.col("text").str.head(pl.col("text").str.len_chars() - tail_len).alias("head"),
        pl.when(has_ts)
        .then(pl.col("_prev"))
        .otherwise(pl.col("_last"))
        .cast(pl.Float64, strict=False)
        .alias("value"),
        epoch_to_utc(pl.when(has_ts).then(pl.col("_last"))).alias("sample_ts"),
    )


def _split_general(lines: pl.DataFrame) -> pl.DataFrame:
    """head, value and timestamp of any valid line (tabs, exemplars ...), by regex."""
    tail = pl.col("text").str.replace(HEAD_RE, "")
    frame = lines.select("text", tail.alias("_tail"))
    head_len = pl.col("text").str.len_chars() - pl.col("_tail").str.len_chars()
    return frame.select(
        "text",
        pl.col("text").str.head(head_len).alias("head"),
        pl.col("_tail").str.extract_groups(_TAIL_RE).alias("_g"),
    ).select(
        "text",
        "head",
        pl.col("_g").struct.field("1").cast(pl.Float64, strict=False).alias("value"),
        epoch_to_utc(pl.col("_g").struct.field("2")).alias("sample_ts"),
    )


def parse_heads(heads: pl.Series, aliases: AliasTable) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Distinct `name{labels}` heads -> (one row per head of a known metric, label pairs).

    The first frame has head, head_id (0, 1, ... in this call), name (as exposed), metric,
    suffix, type, labels (all labels as a JSON object), series (the labels without `le`, as
    JSON) and one column per LABEL_COLUMNS entry and replica label; the second has head, key,
    value for every label (unescaped).
    """
    frame = (
        pl.DataFrame({"head": heads.unique()})
        .with_row_index("head_id")
        .with_columns(pl.col("head").str.extract(rf"^({_NAME})", 1).alias("name"))
    )
    frame = aliases.resolve(frame)
    pairs = _label_pairs(frame)
    kv = pl.format('"{}":"{}"', "key", pl.col("value").str.replace_many(_JSON_FROM, _JSON_TO))
    grouped = pairs.group_by("head", maintain_order=True).agg(
        kv.str.join(",").alias("labels"),
        kv.filter(pl.col("key") != "le").str.join(",").alias("series"),
        *(
            pl.col("value").filter(pl.col("key") == k).first().alias(f"label_{k}")
            for k in dict.fromkeys((*LABEL_COLUMNS, *aliases.replica_label_names()))
        ),
    )
    out = frame.join(grouped, on="head", how="left").with_columns(
        _braced("labels"),
        _braced("series"),
    )
    return out, pairs


def _braced(column: str) -> pl.Expr:
    return pl.concat_str([pl.lit("{"), pl.col(column).fill_null(""), pl.lit("}")]).alias(column)


def _label_pairs(frame: pl.DataFrame) -> pl.DataFrame:
    block = pl.col("head").str.slice(pl.col("name").str.len_chars())
    return (
        frame.select("head", block.str.extract_all(LABEL_PAIR).alias("pair"))
        .explode("pair")
        .filter(pl.col("pair").is_not_null())
        .select(
            "head",
            pl.col("pair").str.extract(r"^([a-zA-Z_][a-zA-Z0-9_]*)", 1).alias("key"),
            pl.col("pair")
            .str.extract(r'"((?:[^"\\]|\\.)*)"$', 1)
            .str.replace_many(*_PROM_ESCAPES)
            .alias("value"),
        )
    )


def escape_label_value(value: str) -> str:
    """A label value as the exposition writes it (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_head(name: str, labels: dict[str, str]) -> str:
    """`name{k="v",...}` with exposition escaping: what parse_heads reads back."""
    if not labels:
        return name
    body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
    return f"{name}{{{body}}}"
