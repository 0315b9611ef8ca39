"""Field converters named in format packs, as polars expressions (vectorised).

Sizes: vLLM and PyTorch compute every printed size with powers of two (vLLM's "GB" in
`Loading model weights took 14.99 GB` and `(24.00 GB KV cache is needed` is bytes / 2**30),
so KB/MB/GB and KiB/MiB/GiB are all read as binary units.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

_SIZE = r"^\s*([\d.,]+)\s*([KMGTP]?i?B|bytes?)?\s*$"
_UNIT_POWER = {"": 0, "b": 0, "byte": 0, "bytes": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def _size(col: pl.Expr, bare_power: int) -> pl.Expr:
    """A printed size in bytes (float); a bare number is in 1024**bare_power units."""
    parts = col.str.extract_groups(_SIZE)
    number = parts.struct.field("1").str.replace_all(",", "").cast(pl.Float64, strict=False)
    unit = parts.struct.field("2").fill_null("").str.to_lowercase()
    letter = pl.when(unit.str.starts_with("byte")).then(pl.lit("bytes")).otherwise(unit.str.head(1))
    power = (
        pl.when(unit == "")
        .then(pl.lit(bare_power))
        .otherwise(letter.replace_strict(_UNIT_POWER, default=None, return_dtype=pl.Int64))
    )
    return number * pl.lit(1024.0).pow(power)


# The largest float below 2**63, so the saturated value still casts to a 64-bit integer.
INT64_SATURATED = 9.2e18


def _whole_bytes(size: pl.Expr) -> pl.Expr:
    """A size in bytes as an integer; past 64 bits it saturates (validate.py reports it)."""
    return size.round(0).clip(-INT64_SATURATED, INT64_SATURATED).cast(pl.Int64)


_PROCESS = r"Process (\d+) has ([\d.]+ [KMGT]?i?B|\d+ bytes) memory in use"


def _process_list(col: pl.Expr) -> pl.Expr:
    """'Process N has X memory in use.' clauses as a JSON list of {"pid", "bytes"}."""
    item = pl.element()
    as_json = pl.concat_str(
        pl.lit('{"pid": '),
        item.str.extract(_PROCESS, 1),
        pl.lit(', "bytes": '),
        _whole_bytes(_size(item.str.extract(_PROCESS, 2), 0)).cast(pl.String),
        pl.lit("}"),
    )
    items = col.str.extract_all(_PROCESS).list.eval(as_json)
    listed = pl.concat_str(pl.lit("["), items.list.join(", "), pl.lit("]"))
    return pl.when(items.list.len() > 0).then(listed)


def convert(name: str, ftype: str) -> pl.Expr:
    """The typed column for a captured string field."""
    col = pl.col(name)
    if ftype == "int":
        digits = col.str.replace_all(",", "")
        # More digits than 64 bits hold saturate instead of vanishing into NULL, so the
        # plausibility check (validate.py) reports the line rather than nothing at all.
        wide = digits.cast(pl.Float64, strict=False).clip(-INT64_SATURATED, INT64_SATURATED)
        exact = digits.cast(pl.Int64, strict=False)
        return exact.fill_null(wide.cast(pl.Int64, strict=False)).alias(name)
    if ftype == "float":
        return col.str.replace_all(",", "").cast(pl.Float64, strict=False).alias(name)
    if ftype == "ratio_pct":
        # Printed ratios have at most four decimals; rounding drops float noise (0.94 x 100).
        ratio = col.str.replace_all(",", "").cast(pl.Float64, strict=False)
        return (ratio * 100).round(6).alias(name)
    if ftype == "bytes":
        return _whole_bytes(_size(col, 0)).alias(name)
    if ftype == "gib":
        return (_size(col, 3) / 2**30).alias(name)
    if ftype == "count":
        trimmed = col.str.strip_chars()
        items = trimmed.str.count_matches(",") + 1
        return pl.when(trimmed == "").then(0).otherwise(items).cast(pl.Int64).alias(name)
    if ftype == "proclist":
        return _process_list(col).alias(name)
    if ftype == "lower":
        return col.str.to_lowercase().alias(name)
    return col.alias(name)  # str, pydict (decoded later, per matched row)


def convert_fields(frame: pl.DataFrame, fields: Mapping[str, str]) -> pl.DataFrame:
    """The typed columns for captured string fields, each as `convert` gives it.

    Most printed numbers are plain: for those one cast gives what `convert` computes with
    four more passes (thousands separators, 64-bit saturation), which made typing the
    fields of a log's stats lines cost half as much as matching them.
    """
    plain = [_plain_number(frame[name], ftype) for name, ftype in fields.items()]
    return frame.with_columns(
        fast if fast is not None else convert(name, ftype)
        for (name, ftype), fast in zip(fields.items(), plain, strict=True)
    )


def _plain_number(col: pl.Series, ftype: str) -> pl.Series | None:
    """An int or float field cast at once, when no value holds a thousands separator and
    (ints) every value is a 64-bit integer as printed: else None, for `convert`."""
    if ftype not in ("int", "float") or col.dtype != pl.String:
        return None
    if col.str.contains(",", literal=True).any():
        return None
    cast = col.cast(pl.Int64 if ftype == "int" else pl.Float64, strict=False)
    if ftype == "int" and cast.null_count() != col.null_count():
        return None
    return cast
