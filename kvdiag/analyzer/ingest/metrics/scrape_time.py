"""When a scrape was taken: from its file name, a marker line, or the sample itself.

Accepted shapes (docs/inputs.md's table names the main ones):

* File names `<unix_ts>.prom` (also `.txt`, `.metrics`, `.om`), optionally after a word and a
  separator (`metrics-1795959281.911.prom`), with unix seconds (10 digits, optional
  fraction) or milliseconds (13 digits), or an ISO-8601 stamp (`2026-11-29T13:34:39Z.prom`;
  `-` or nothing may stand for `:` in the time, as file systems require).
* Marker lines inside a file holding several scrapes: a comment with an optional keyword
  and a time, e.g. `# scrape at 1795959281.911`, `# scrape_ts=1795959281911`,
  `# scraped at: 2026-11-29T13:34:39Z`, `# timestamp 2026-11-29 13:34:39+00:00`, `# ts=...`,
  `# time: ...`, `# date ...` or just `# 1795959281`; or a line that is only a time (what
  `date +%s` or `date -Is` prints before each `curl`). A marker starts a scrape that lasts
  until the next marker; `# EOF` (OpenMetrics) ends one.
* Sample timestamps: the optional number after the value. Prometheus text 0.0.4 writes
  milliseconds, OpenMetrics seconds; a magnitude of 1e11 or more is read as milliseconds.

Times without a zone are UTC. A sample's own timestamp wins over a marker, and a marker
over the file name.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import polars as pl

_EPOCH = r"\d{10}(?:\.\d+)?|\d{13}(?:\.\d+)?"
_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
TIME_RE = rf"(?:{_EPOCH}|{_ISO})"
_KEYWORD = r"(?:scrape(?:[ _-]?(?:ts|time|timestamp))?|scraped|timestamp|time|ts|date)"
MARKER_RE = rf"(?i)^#[ \t]*(?:{_KEYWORD}[ \t]*(?:at\b)?[ \t]*[:=@]?[ \t]*)?({TIME_RE})[ \t]*$"
BARE_TIME_RE = rf"^[ \t]*({TIME_RE})[ \t]*$"
EOF_RE = r"^#[ \t]*EOF[ \t]*$"

_FILE_ISO = r"\d{4}-?\d{2}-?\d{2}T\d{2}[:-]?\d{2}[:-]?\d{2}(?:\.\d+)?Z?"
SCRAPE_NAME = re.compile(
    rf"^(?:[A-Za-z][\w-]*?[-_.])?({_EPOCH}|{_FILE_ISO})\.(?:prom|txt|metrics|om)$"
)
_MARKER_M = re.compile(MARKER_RE, re.MULTILINE)
_BARE_M = re.compile(BARE_TIME_RE, re.MULTILINE)
# Epoch values at or above this are milliseconds (1e11 s is the year 5138).
MS_THRESHOLD = 1e11


def scrape_time_from_name(name: str) -> datetime | None:
    """`1795959281.911.prom` -> that instant (naive UTC), else None."""
    m = SCRAPE_NAME.match(name)
    if not m:
        return None
    stamp = m.group(1)
    if stamp[:4].isdigit() and "T" in stamp:
        digits = re.sub(r"[-:]", "", stamp.rstrip("Z"))
        return datetime.strptime(digits.split(".")[0], "%Y%m%dT%H%M%S")
    value = float(stamp)
    if value >= MS_THRESHOLD:
        value /= 1000
    return datetime.fromtimestamp(value, tz=UTC).replace(tzinfo=None)


def epoch_to_utc(seconds_or_ms: pl.Expr) -> pl.Expr:
    """A numeric epoch (seconds, or milliseconds when >= 1e11) as a naive UTC datetime."""
    value = seconds_or_ms.cast(pl.Float64, strict=False)
    micros = pl.when(value.abs() >= MS_THRESHOLD).then(value * 1e3).otherwise(value * 1e6).round(0)
    return pl.from_epoch(micros.cast(pl.Int64, strict=False), time_unit="us")


def text_to_utc(text: pl.Expr) -> pl.Expr:
    """Epoch seconds/milliseconds or ISO-8601 text as a naive UTC datetime (null if neither)."""
    iso = text.str.strip_chars().str.replace(r"Z$", "+00:00").str.replace(" ", "T")
    zoned = (
        iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%z", strict=False, time_unit="us")
        .dt.convert_time_zone("UTC")
        .dt.replace_time_zone(None)
    )
    naive = iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False, time_unit="us")
    return pl.coalesce(epoch_to_utc(text.str.strip_chars()), zoned, naive)


def epoch_text_time(text: str) -> datetime | None:
    """One epoch number as text (seconds or milliseconds) as a naive UTC datetime."""
    value = pl.select(epoch_to_utc(pl.lit(text))).item()
    return value if isinstance(value, datetime) else None


def first_time_in(text: str) -> datetime | None:
    """The first marker time in a text (a file head), for dating logs before ingestion."""
    text = text.replace("\r\n", "\n")
    found = [m for p in (_MARKER_M, _BARE_M) if (m := p.search(text))]
    if not found:
        return None
    first = min(found, key=lambda m: m.start())
    value = pl.select(text_to_utc(pl.lit(first.group(1)))).item()
    return value if isinstance(value, datetime) else None
