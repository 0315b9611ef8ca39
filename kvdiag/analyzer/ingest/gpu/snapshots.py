"""What the nvidia-smi readers share: value parsing, timestamps, and the snapshot book.

One file may hold several snapshots (a `watch` capture, a `date; nvidia-smi` loop, a
`--query-gpu ... -l 5` log, several XML documents). The book numbers them in order, gives
each the time stated just before it (see `timestamp_of`), and collects its GPU and
process rows with provenance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

_NA = re.compile(
    r"^\[?(?:N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost)\]?$"
)
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(?:MiB|%|W|C|MHz)?$")

_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
# `date` / nvidia-smi's own header: "Wed May  6 22:25:35 2026", "Wed May  6 22:25:35 UTC 2026"
_CTIME = re.compile(
    r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r"\s+(?P<day>\d{1,2})\s+(?P<hms>\d\d:\d\d:\d\d)(?:\s+(?P<zone>[A-Z]{1,5}|[+-]\d{4}))?"
    r"\s+(?P<year>\d{4})$"
)
_ISO = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<zone>Z|[+-]\d\d:?\d\d)?$"
)
_EPOCH = re.compile(r"^(?P<epoch>1\d{9}(?:\.\d+)?)$")
# `watch nvidia-smi`: "Every 2.0s: nvidia-smi        gpu-node-1: Wed May  6 22:25:35 2026"
WATCH = re.compile(r"^Every\s+[\d.]+s:\s+.*?\s{2,}(?P<host>[\w.-]+):\s+(?P<when>\w{3} .+)$")
_UTC_ZONES = {"UTC", "GMT", "Z", "+0000"}


def na(value: str) -> bool:
    """nvidia-smi's words for "no value": N/A, [N/A], [Not Supported] ..."""
    return not value.strip() or bool(_NA.match(value.strip()))


def number(value: str) -> float | None:
    """A number with or without its unit ("24576 MiB", "24576", "5 %"); None when N/A.

    Raises ValueError for text that is neither a number nor a "no value" word.
    """
    text = value.strip()
    if na(text):
        return None
    m = _NUMBER.match(text)
    if not m:
        raise ValueError(f"not a number: {value!r}")
    return float(m.group(1))


def ctime(text: str) -> tuple[datetime, str | None] | None:
    """A ctime-style date ("Wed May  6 22:25:35 2026") and its zone word, if it is one."""
    m = _CTIME.match(text.strip())
    if not m:
        return None
    when = datetime.strptime(
        f"{m['year']}-{_MONTHS.index(m['mon']) + 1:02d}-{int(m['day']):02d} {m['hms']}",
        "%Y-%m-%d %H:%M:%S",
    )
    return when, m["zone"]


def timestamp_of(line: str) -> tuple[datetime, str] | None:
    """The instant a timestamp line states (naive UTC when the line says UTC or an offset).

    Accepted: ctime dates (nvidia-smi's header, `date`), ISO 8601, a 10-digit Unix time.
    A date without zone is the machine's local time: it is kept as printed and the note
    says so, like vLLM's own log times.
    """
    text = line.strip()
    parsed = ctime(text)
    if parsed:
        when, zone = parsed
        if zone and zone not in _UTC_ZONES:
            return when, f"date with zone {zone} kept as printed"
        return when, "UTC" if zone else "date as printed (machine local time, no zone)"
    m = _ISO.match(text)
    if m:
        zone = m["zone"]
        stamp = m["ts"].replace(",", ".").replace(" ", "T")
        if zone:
            aware = datetime.fromisoformat(stamp + ("+00:00" if zone == "Z" else zone))
            return aware.astimezone(UTC).replace(tzinfo=None), "ISO 8601 with zone"
        return datetime.fromisoformat(stamp), "ISO 8601 without zone (kept as printed)"
    m = _EPOCH.match(text)
    if m:
        return datetime.fromtimestamp(float(m["epoch"]), tz=UTC).replace(tzinfo=None), "Unix time"
    return None


@dataclass
class Snapshot:
    number: int
    kind: str  # nvsmi_table | nvsmi_csv | nvsmi_xml
    ts: datetime | None
    host: str | None
    driver: str | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    procs: list[dict[str, Any]] = field(default_factory=list)

    def has_gpu(self, key: Any) -> bool:
        return key is not None and any(g.get("_key") == key for g in self.gpus)


@dataclass
class SnapshotBook:
    """Snapshots of one file, in order, with the time and host announced before each."""

    rel: str
    replica: str
    snapshots: list[Snapshot] = field(default_factory=list)
    pending_ts: datetime | None = None
    pending_host: str | None = None
    time_notes: set[str] = field(default_factory=set)

    def announce(self, ts: datetime | None, note: str | None, host: str | None = None) -> None:
        """A time (and host) stated on its own line: it dates the next snapshot."""
        if ts is not None:
            self.pending_ts = ts
            if note:
                self.time_notes.add(note)
        if host:
            self.pending_host = host

    def start(self, kind: str, driver: str | None = None) -> Snapshot:
        snap = Snapshot(len(self.snapshots), kind, self.pending_ts, self.pending_host, driver)
        self.pending_ts = None
        self.snapshots.append(snap)
        return snap

    def current(self, kind: str) -> Snapshot:
        """The open snapshot of this kind; a new one when none is open or a new time came."""
        last = self.snapshots[-1] if self.snapshots else None
        if last is None or last.kind != kind or self.pending_ts is not None:
            return self.start(kind)
        return last

    def add_gpu(self, snap: Snapshot, line_no: int, raw: str, **values: Any) -> None:
        snap.gpus.append({"source_line": line_no, "raw": raw, **values})

    def add_proc(self, snap: Snapshot, line_no: int, raw: str, **values: Any) -> None:
        snap.procs.append({"source_line": line_no, "raw": raw, **values})
