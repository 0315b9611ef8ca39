"""A real Prometheus for the live-source tests: recorded scrapes backfilled, then served.

Scrape files become OpenMetrics with timestamps (each sample stamped with its scrape's
time, `job` and `instance` labels added), `promtool tsdb create-blocks-from openmetrics`
writes the blocks, and `prometheus` serves them on a free loopback port. Without the
binaries (a developer machine) the tests skip with the reason; under CI they fail, since
.ci/run installs Debian's `prometheus` package.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvdiag.analyzer.live.promql import exposed_names
from kvdiag.analyzer.schema.aliases import load_aliases

_NAME_END = re.compile(r"[{ ]")


def binaries() -> tuple[str, str]:
    """(prometheus, promtool) paths; skip (or, under CI, fail) when they are missing."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if found[0] and found[1]:
        return found[0], found[1]
    reason = "prometheus and promtool are not installed (Debian: apt-get install prometheus)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; .ci/run installs them, so CI must run these tests")
    pytest.skip(reason)


@dataclass(frozen=True, slots=True)
class Replay:
    """One replica's recorded scrapes, replayed under these labels and transformations."""

    scrapes: Path  # a folder of <unix_ts>.prom files
    job: str
    instance: str
    shift_s: float = 0.0  # added to every scrape time
    keep: Callable[[str], bool] | None = None  # which sample names to keep (None: all)
    value: Callable[[str, float], float] | None = None  # (name, value) -> replayed value


def scrape_files(folder: Path) -> list[tuple[float, Path]]:
    return sorted((float(p.stem), p) for p in folder.glob("*.prom"))


def planned_names() -> set[str]:
    """The exposed names the live source fetches: all a fleet replay needs to carry."""
    return set(exposed_names(load_aliases()))


def openmetrics(replay: Replay) -> Iterator[str]:
    """Sample lines with `job`/`instance` added and the scrape time appended."""
    extra = f'instance="{replay.instance}",job="{replay.job}"'
    for ts, path in scrape_files(replay.scrapes):
        stamp = f"{ts + replay.shift_s:.3f}"
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line or line.startswith("#"):
                continue
            end = _NAME_END.search(line)
            if end is None:
                continue
            name = line[: end.start()]
            if replay.keep is not None and not replay.keep(name):
                continue
            head, _, value = line.rpartition(" ")
            if replay.value is not None:
                value = repr(replay.value(name, float(value)))
            if line[end.start()] == "{":
                head = f"{name}{{{extra},{head[end.start() + 1 :]}"
            else:
                head = f"{name}{{{extra}}}"
            yield f"{head} {value} {stamp}"


def write_openmetrics(replays: Iterable[Replay], path: Path) -> int:
    """All replays into one OpenMetrics file (closed by `# EOF`); returns the sample count."""
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for replay in replays:
            for line in openmetrics(replay):
                fh.write(line + "\n")
                count += 1
        fh.write("# EOF\n")
    return count


def backfill(openmetrics_file: Path, data: Path) -> None:
    _, promtool = binaries()
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics_file), str(data)],
        check=True,
        capture_output=True,
        timeout=600,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrometheusServer:
    """`prometheus` over a backfilled TSDB on a loopback port; stop() ends it."""

    data: Path
    url: str = ""
    _process: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        prometheus, _ = binaries()
        config = self.data.parent / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\n")  # it scrapes nothing
        for _ in range(3):  # the free port may be taken before prometheus binds it
            port = _free_port()
            log = (self.data.parent / "prometheus.log").open("wb")
            self._process = subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.data}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--storage.tsdb.retention.time=100y",  # recorded data may be old
                    "--query.lookback-delta=5m",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            self.url = f"http://127.0.0.1:{port}"
            if self._wait_ready():
                return self
            self.stop()
        raise RuntimeError(f"prometheus did not start; see {self.data.parent / 'prometheus.log'}")

    def _wait_ready(self, timeout_s: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None


def serve(replays: list[Replay], workdir: Path) -> PrometheusServer:
    """Backfill `replays` under `workdir` and start a Prometheus over them."""
    om = workdir / "replay.om"
    write_openmetrics(replays, om)
    data = workdir / "data"
    backfill(om, data)
    om.unlink()
    return PrometheusServer(data).start()
