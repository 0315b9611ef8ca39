"""Build large incidents by replaying the real lines of a fixture.

Logs: the fixture's server.log start-up is written once, then its steady-state lines
(access lines, stats lines, everything after start-up) are replayed block after block
with timestamps shifted forward and the numbers of the stats lines varied, until the
file reaches the requested size. Scrapes: the fixture's real scrape files are replayed
under new `<unix_ts>.prom` names one second apart, with the KV usage, running and waiting
gauges varied, and each counter (`_total`, `_count`, `_sum`, `_bucket`) raised on every pass
over the real files by its rise over them, so that counters go on rising as on a live server
instead of resetting every 200 files, and a pass's lines are not the last pass's again.
Crash loop: the fixture's whole server.log (start-up, configuration dump, pool lines, traffic,
shutdown) is written again and again, each copy's timestamps shifted 10 minutes past the
last's, as a server restarted over and over leaves its log. Many replicas: 50 folders, each
a log and scrapes made as above with a seed of its own. Archive: a quarter of each shape (a
steady log, a crash loop, the replicas, a scrape series) in one `.tar.gz`. Nothing is
invented beyond shifting times and varying numbers.

    python bench/make_incident.py logs  OUT_DIR --gb 1
    python bench/make_incident.py crashloop OUT_DIR --gb 1
    python bench/make_incident.py scrapes OUT_DIR --count 86400
    python bench/make_incident.py manyreplicas OUT_DIR --gb 1   # 50 replica folders
    python bench/make_incident.py archive OUT_DIR --gb 1        # every shape, one .tar.gz
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "vllm-b-saturation" / "incident"
_TS = re.compile(rb"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_STATS = re.compile(rb"Running: \d+ reqs, Waiting: \d+ reqs, (\w+) KV cache usage: [\d.]+%")
_PORT = re.compile(rb"127\.0\.0\.1:\d+")
_GAUGES = (
    b"vllm:kv_cache_usage_perc{",
    b"vllm:num_requests_running{",
    b"vllm:num_requests_waiting{",
)


def _split_startup(lines: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """Start-up is everything before the first access line; the rest is steady state."""
    for i, line in enumerate(lines):
        if line.startswith(b"INFO:     127.0.0.1"):
            return lines[:i], lines[i:]
    return lines, []


def _line_time(line: bytes, year: int) -> datetime | None:
    m = _TS.search(line)
    if m is None:
        return None
    mo, d, h, mi, s = (int(g) for g in m.groups())
    return datetime(year, mo, d, h, mi, s)


def _vary_stats(line: bytes, rng: random.Random) -> bytes:
    def repl(m: re.Match[bytes]) -> bytes:
        running, waiting = rng.randint(0, 8), rng.randint(0, 40)
        usage = rng.uniform(0, 100)
        return b"Running: %d reqs, Waiting: %d reqs, %s KV cache usage: %.1f%%" % (
            running,
            waiting,
            m.group(1),
            usage,
        )

    return _STATS.sub(repl, line)


def make_logs(out: Path, gigabytes: float, seed: int = 7) -> Path:
    """Write OUT/server.log of about `gigabytes` GB from the fixture's real lines."""
    rng = random.Random(seed)
    lines = (FIXTURE / "server.log").read_bytes().split(b"\n")
    startup, steady = _split_startup(lines)
    year = 2026
    times = [_line_time(line, year) for line in steady]
    known = [t for t in times if t is not None]
    span = (max(known) - min(known)) + timedelta(seconds=10) if known else timedelta(seconds=60)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "server.log"
    target = int(gigabytes * 1e9)
    written = 0
    with path.open("wb") as fh:
        block = b"\n".join(startup) + b"\n"
        fh.write(block)
        written += len(block)
        shift = timedelta(0)
        while written < target:
            shift += span
            chunk = []
            for line, t in zip(steady, times, strict=True):
                if t is not None:
                    line = _TS.sub((t + shift).strftime("%m-%d %H:%M:%S").encode(), line, 1)
                    line = _vary_stats(line, rng)
                elif line.startswith(b"INFO:     127.0.0.1:"):
                    line = _PORT.sub(b"127.0.0.1:%d" % rng.randint(20000, 65000), line, 1)
                chunk.append(line)
            block = b"\n".join(chunk) + b"\n"
            fh.write(block)
            written += len(block)
    return path


# A crash loop's copies 10 minutes apart: longer than the fixture's run (4 minutes), so that
# one copy's lines end before the next copy's start, as a restarted server's do.
CRASHLOOP_EVERY = timedelta(minutes=10)


def _timed_parts(line: bytes, year: int) -> tuple[bytes, datetime | None, bytes]:
    """A line cut around its first timestamp: (before, time, after); (line, None, b"")."""
    m = _TS.search(line)
    t = _line_time(line, year)
    if m is None or t is None:
        return line, None, b""
    return line[: m.start()], t, line[m.end() :]


def make_crashloop(out: Path, gigabytes: float, fixture: Path = FIXTURE) -> Path:
    """Write OUT/server.log of about `gigabytes` GB: the fixture's whole server.log again and
    again, the timestamps of copy k shifted by k x 10 minutes."""
    lines = (fixture / "server.log").read_bytes().rstrip(b"\n").split(b"\n")
    parts = [_timed_parts(line, 2026) for line in lines]
    base_times = sorted({t for _, t, _ in parts if t is not None})
    out.mkdir(parents=True, exist_ok=True)
    path = out / "server.log"
    target, written, shift = int(gigabytes * 1e9), 0, timedelta(0)
    with path.open("wb") as fh:
        while written < target:
            # Formatted once per distinct second of a copy, not once per line.
            stamp = {t: (t + shift).strftime("%m-%d %H:%M:%S").encode() for t in base_times}
            block = b"".join(
                line + b"\n" if t is None else before + stamp[t] + after + b"\n"
                for (before, t, after), line in zip(parts, lines, strict=True)
            )
            fh.write(block)
            written += len(block)
            shift += CRASHLOOP_EVERY
    return path


def _vary_scrape(body: bytes, rng: random.Random) -> bytes:
    out = []
    for line in body.split(b"\n"):
        if line.startswith(_GAUGES):
            head, _, _ = line.rpartition(b" ")
            value = rng.uniform(0, 1) if b"usage" in line else float(rng.randint(0, 40))
            line = head + b" " + repr(value).encode()
        out.append(line)
    return b"\n".join(out)


# Bumped when replayed scrapes change, so that bench/out/ caches of the old form are not reused.
SCRAPES_FORM = 2
_COUNTER_SUFFIXES = (b"_total", b"_count", b"_sum", b"_bucket")


def _counter_steps(bodies: list[bytes]) -> dict[bytes, float]:
    """Per counter line head (`name{labels}`): its rise over the real scrapes (0 if it fell)."""
    first: dict[bytes, float] = {}
    last: dict[bytes, float] = {}
    for body in bodies:
        for line in body.split(b"\n"):
            head, value = _counter_sample(line)
            if head is not None:
                first.setdefault(head, value)
                last[head] = value
    return {head: max(0.0, last[head] - first[head]) for head in first}


def _counter_sample(line: bytes) -> tuple[bytes | None, float]:
    if line.startswith(b"#"):
        return None, 0.0
    head, _, text = line.rpartition(b" ")
    if not head.split(b"{", 1)[0].endswith(_COUNTER_SUFFIXES):
        return None, 0.0
    try:
        return head, float(text)
    except ValueError:
        return None, 0.0


def _continue_counters(body: bytes, steps: dict[bytes, float], cycle: int) -> bytes:
    """The body with each counter raised by `cycle` times its rise over the real scrapes, so
    that replaying the real files again continues the counters instead of resetting them,
    and the lines of one replay differ from the last one's as a real next scrape's do."""
    if cycle == 0:
        return body
    out = []
    for line in body.split(b"\n"):
        head, value = _counter_sample(line)
        if head is not None and steps.get(head):
            raised = value + cycle * steps[head]
            written = line.rpartition(b" ")[2]  # as the server wrote it: `12.0` or `12`
            plain = raised.is_integer() and written.isdigit()
            line = head + b" " + (b"%d" % raised if plain else repr(raised).encode())
        out.append(line)
    return b"\n".join(out)


def make_scrapes(out: Path, count: int, seed: int = 7) -> Path:
    """Write OUT/metrics/<ts>.prom x count from the fixture's real scrapes, 1 s apart."""
    rng = random.Random(seed)
    sources = sorted((FIXTURE / "metrics").glob("*.prom"))
    bodies = [p.read_bytes() for p in sources]
    steps = _counter_steps(bodies)
    folder = out / "metrics"
    folder.mkdir(parents=True, exist_ok=True)
    start = float(sources[0].name.rsplit(".", 1)[0])
    for i in range(count):
        cycle, k = divmod(i, len(bodies))
        body = _vary_scrape(_continue_counters(bodies[k], steps, cycle), rng)
        (folder / f"{start + i:.3f}.prom").write_bytes(body)
    return folder


# A fleet's replicas: each a folder with its own log and scrapes, as `kubectl logs` and a
# scraper per pod leave them. Half of a replica's share of the size is log, half scrapes.
REPLICAS = 50
_SCRAPE_BYTES = 54_600  # a replayed scrape file's size (4.72 GB / 86,400)


def make_manyreplicas(out: Path, gigabytes: float, replicas: int = REPLICAS) -> Path:
    """Write OUT/replica-NN/{server.log,metrics/} x `replicas`, about `gigabytes` GB in all:
    each replica's log and scrapes replayed as for one server, with a seed of its own."""
    share = gigabytes / replicas
    scrapes = max(1, int(share * 1e9 / 2 / _SCRAPE_BYTES))
    for k in range(replicas):
        folder = out / f"replica-{k:02d}"
        make_logs(folder, share / 2, seed=7 + k)
        make_scrapes(folder, scrapes, seed=7 + k)
    return out


def make_archive(out: Path, gigabytes: float) -> Path:
    """Write OUT/incident.tar.gz: every shape in one archive, a quarter of `gigabytes` each
    (a steady log, a crash loop, 50 replicas, a scrape series), as an incident is sent."""
    import tarfile

    quarter = gigabytes / 4
    parts = out / "parts"
    make_logs(parts / "steady", quarter)
    make_crashloop(parts / "crashloop", quarter)
    make_manyreplicas(parts / "fleet", quarter)
    make_scrapes(parts / "scrapes", max(1, int(quarter * 1e9 / _SCRAPE_BYTES)))
    archive = out / "incident.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        for child in sorted(parts.iterdir()):
            tar.add(child, arcname=child.name)
    shutil.rmtree(parts)
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["logs", "crashloop", "scrapes", "manyreplicas", "archive"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--gb", type=float, default=1.0, help="log size in GB")
    parser.add_argument("--count", type=int, default=86400, help="number of scrapes")
    args = parser.parse_args()
    if args.what == "logs":
        print(make_logs(args.out, args.gb))
    elif args.what == "crashloop":
        print(make_crashloop(args.out, args.gb))
    elif args.what == "manyreplicas":
        print(make_manyreplicas(args.out, args.gb))
    elif args.what == "archive":
        print(make_archive(args.out, args.gb))
    else:
        print(make_scrapes(args.out, args.count))


if __name__ == "__main__":
    main()
