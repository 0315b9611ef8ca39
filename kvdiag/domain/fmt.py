"""Numbers and quantities as people read them, the same in every format."""

from __future__ import annotations

import math
from datetime import datetime

from kvdiag.domain.records.diagnosis import Scalar
from kvdiag.domain.safe_text import plain

_PLURAL_UNITS = {"requests", "tokens", "preemptions", "retractions", "blocks"}
_BYTE_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "MB": 1e6, "GB": 1e9}


def fmt_value(value: object) -> str:
    """A scalar: thousands separators, four significant digits, text made safe."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return plain(value)


def to_bytes(value: Scalar, unit: str | None) -> float | None:
    """The value in bytes when the unit is a memory unit, else None."""
    if unit not in _BYTE_UNITS or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) * _BYTE_UNITS[unit]


def fmt_bytes(n: float) -> str:
    """Binary units, three significant digits: 17 MiB, 79.2 GiB; bytes under a MiB."""
    # Under a MiB the exact count reads better (a KV slot of 2,048 B, not 2 KiB).
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if abs(n) >= size:
            return f"{n / size:,.3g} {unit}" if abs(n) < 1000 * size else f"{n / size:,.0f} {unit}"
    return f"{n:,.0f} B"


def fmt_quantity(value: Scalar, unit: str | None) -> str:
    """A value with its unit: bytes humanised, ratios as percent, counts with separators."""
    if value is None or value == "":
        return "—"
    as_bytes = to_bytes(value, unit)
    if as_bytes is not None:
        return fmt_bytes(as_bytes)
    if unit == "ratio" and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{100 * value:.3g}%"
    if unit == "fraction" and isinstance(value, float):
        return f"{value:g}"
    if unit == "%" and isinstance(value, int | float):
        return f"{value:.3g}%"
    text = fmt_value(value)
    if unit in _PLURAL_UNITS and value == 1:
        unit = unit[:-1]  # "1 request", not "1 requests"
    return f"{text} {plain(unit)}" if unit and not isinstance(value, bool) else text


def fmt_time(iso: str | None) -> str:
    """An ISO time as 'YYYY-MM-DD HH:MM:SS' (UTC); '—' when absent."""
    if not iso:
        return "—"
    return plain(iso).replace("T", " ")[:19]


def fmt_duration(seconds: float) -> str:
    """A span in the largest units that keep it short: 45 s, 2 min 25 s, 3 h 10 min."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def fmt_window(window: tuple[str, str] | None, has_series: bool = True) -> str:
    """The incident window in words."""
    if window is None and not has_series:
        return "unknown: no time series in the inputs"
    if window is None:
        return "none: usage stayed below 90% and no request waited"
    start, end = (datetime.fromisoformat(t) for t in window)
    first, last = fmt_time(window[0]), fmt_time(window[1])
    if first[:10] == last[:10]:
        last = last[11:]
    return f"{first} to {last} UTC ({fmt_duration((end - start).total_seconds())})"


def coverage(parsed: int, total: int) -> str:
    """Share of lines parsed, never rounded up to a false 100 %."""
    if not total:
        return "—"
    share = 100 * parsed / total
    return f"{math.floor(share * 10) / 10:.1f}%"


def humanise(name: str) -> str:
    """An enum value or snake_case name as words: shrunken_pool -> shrunken pool."""
    return plain(name).replace("_", " ")


def fmt_setting(key: str, value: str | None, exact: bool = False) -> str:
    """A setting's value as stated; a byte count (`*_bytes`) also in units, and with
    `exact` its bytes too: `17.0 MiB (17,825,792 B)`."""
    if value is None:
        return "not stated"
    if not key.endswith("_bytes"):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    text = fmt_quantity(number, "bytes")
    return f"{text} ({int(number):,} B)" if exact else text
