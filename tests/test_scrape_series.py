"""Scrape series: the scrapes in a folder or a file, how they are found, timed and located."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from functools import partial
from pathlib import Path

import pytest

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.base import Account, IngestContext
from kvdiag.analyzer.ingest.metrics import exposition as prom_text
from kvdiag.analyzer.ingest.metrics import scrape_files as prom_lines
from kvdiag.analyzer.ingest.metrics.exposition import PromTextIngester
from kvdiag.analyzer.ingest.metrics.scrape_time import scrape_time_from_name
from tests.metric_support import HEAD, copy_real_scrapes, ingest, write


@pytest.mark.parametrize(
    "marker",
    [
        "# scrape at 1795959281.911",
        "# scrape_ts=1795959281911",
        "# scraped at: 2026-11-29T13:34:41.911Z",
        "# timestamp 2026-11-29 13:34:41.911+00:00",
        "# ts=2026-11-29T14:34:41.911+01:00",
        "# Time: 1795959281.911",
        "# 1795959281.911",
        "1795959281.911",
        "2026-11-29T13:34:41.911Z",
    ],
)
def test_marker_lines_split_one_file_into_timed_scrapes(tmp_path: Path, marker: str) -> None:
    second = marker.replace("1795959281", "1795959291").replace("13:34:41", "13:34:51")
    second = second.replace("14:34:41", "14:34:51")
    text = f"{marker}\n{HEAD}vllm:num_requests_running 1\n{second}\nvllm:num_requests_running 2\n"
    write(tmp_path, "dump.txt", text)
    got = ingest(tmp_path)
    rows = got.table("metric_samples").sort("source_line")
    assert rows["ts"].to_list() == [
        datetime(2026, 11, 29, 13, 34, 41, 911000),
        datetime(2026, 11, 29, 13, 34, 51, 911000),
    ]
    scrapes = got.table("scrapes").sort("source_line")
    assert scrapes["source_line"].to_list() == [1, 5]
    assert scrapes["samples"].to_list() == [1, 1]
    assert scrapes["raw"].to_list() == [marker, second]
    assert got.account("dump.txt").lines_unmatched == 0


def test_markers_and_sample_timestamps_date_the_folder(tmp_path: Path) -> None:
    write(tmp_path, "a/dump.txt", f"{HEAD}vllm:num_requests_running 1\r\n# ts=1795959291\r\n")
    write(tmp_path, "b/metrics.prom", f"{HEAD}vllm:num_requests_running 1 1795959281911\n")
    found = discover(tmp_path)
    assert found.anchor == datetime(2026, 11, 29, 13, 34, 41, 911000)
    assert found.anchor_source == "times in b/metrics.prom"


def test_eof_separates_untimed_scrapes(tmp_path: Path) -> None:
    one = HEAD + "vllm:num_requests_running 1\n# EOF\n"
    write(tmp_path, "dump.om", one + one.replace(" 1\n", " 2\n"))
    got = ingest(tmp_path)
    scrapes = got.table("scrapes").sort("source_line")
    assert scrapes["source_line"].to_list() == [1, 5]
    assert scrapes["samples"].to_list() == [1, 1]
    assert got.table("metric_samples")["ts"].null_count() == 2
    assert any("no time" in n for n in got.account("dump.om").notes)


def test_line_numbers_hold_in_a_series_mixing_crlf_bom_and_plain_files(tmp_path: Path) -> None:
    """A batch whose lines do not hold its bytes exactly (a `\r\n` file, a byte-order mark)
    locates its lines by counting each file's newlines: each sample keeps its own line."""
    plain = HEAD + "vllm:num_requests_running 1\n"
    files = {
        "1780000000.prom": plain.encode(),
        "1780000001.prom": (HEAD + "\nvllm:num_requests_running 2\n")
        .replace("\n", "\r\n")
        .encode(),
        "1780000002.prom": b"\xef\xbb\xbf" + (plain.replace(" 1", " 3") + "# end\n").encode(),
        "1780000003.prom": (plain.replace(" 1", " 4")).encode(),
    }
    for name, data in files.items():
        write(tmp_path, f"metrics/{name}", data)
    rows = ingest(tmp_path).table("metric_samples").sort("value")
    assert rows["value"].to_list() == [1, 2, 3, 4]
    assert rows["source_path"].to_list() == [f"metrics/{n}" for n in files]
    assert rows["source_line"].to_list() == [3, 4, 3, 3]


def test_scrape_names_give_the_time() -> None:
    assert scrape_time_from_name("1795959281.911.prom") == datetime(
        2026, 11, 29, 13, 34, 41, 911000
    )
    assert scrape_time_from_name("metrics-1795959281911.prom") == datetime(
        2026, 11, 29, 13, 34, 41, 911000
    )
    assert scrape_time_from_name("2026-11-29T13-34-41Z.prom") == datetime(2026, 11, 29, 13, 34, 41)
    assert scrape_time_from_name("metrics.prom") is None
    assert PromTextIngester.series_key("run/metrics/1795959281.911.prom") == "run/metrics"


def test_a_scrape_series_is_recognised_from_one_member_and_strays_still_sniffed(
    tmp_path: Path,
) -> None:
    """Discovery sniffs one member of `metrics/<ts>.prom` in full; a member that does not
    start like it (an error page saved by the scraper, an empty file) is sniffed alone."""
    real = copy_real_scrapes(tmp_path, 3)
    write(tmp_path, "metrics/1795959290.911.prom", "<html><body>502 Bad Gateway</body></html>\n")
    write(tmp_path, "metrics/1795959291.911.prom", "")
    found = discover(tmp_path)
    (unit,) = found.units
    assert unit.kind == "prom_text"
    assert unit.rels == tuple(f"metrics/{p.name}" for p in real)
    # The files are held as strings (discover.py) and handed out as Paths, in rel order.
    assert unit.files == tuple(tmp_path / "metrics" / p.name for p in real)
    assert all(isinstance(f, Path) and f.is_file() for f in unit.files)
    assert unit.files[1:3] == tuple(unit.files)[1:3]
    assert len({unit, dataclasses.replace(unit, files=tuple(unit.files))}) == 1
    aside = {r.path: r.status for r in found.set_aside}
    assert aside == {
        "metrics/1795959290.911.prom": "unrecognised",
        "metrics/1795959291.911.prom": "skipped",
    }
    assert found.anchor == scrape_time_from_name(real[0].name)


def test_scrape_files_with_a_utf8_byte_order_mark_are_read_like_the_rest(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    help_line = b"# HELP vllm:num_requests_running x\n"
    sample = b'vllm:num_requests_running{engine="0"} %d\n'
    write(tmp_path, "metrics/1700000000.prom", help_line + sample % 1)
    write(tmp_path, "metrics/1700000001.prom", bom + help_line + sample % 2)
    write(tmp_path, "metrics/1700000002.prom", bom + sample % 3)  # a sample first: sniffed
    got = ingest(tmp_path)
    acct = got.account("metrics")
    assert (acct.lines_total, acct.lines_parsed, acct.lines_unmatched) == (5, 5, 0)
    rows = got.table("metric_samples").select("source_path", "source_line", "value").rows()
    assert rows == [
        ("metrics/1700000000.prom", 2, 1.0),
        ("metrics/1700000001.prom", 2, 2.0),
        ("metrics/1700000002.prom", 1, 3.0),
    ]


def test_a_scrape_series_reports_its_progress_batch_by_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes read rise with each batch to the files' size on disk; lines to every line."""
    copy_real_scrapes(tmp_path, 30)
    folder = tmp_path / "metrics"
    # Batches of ~200 KB: several per series (the default is 32 MB).
    monkeypatch.setattr(prom_text, "batches", partial(prom_lines.batches, batch_bytes=200_000))
    found = discover(tmp_path)
    (unit,) = found.units
    calls: list[tuple[int, int]] = []

    def progress(done: int, lines: int) -> None:
        calls.append((done, lines))

    ctx = IngestContext(found.root, None, found.anchor, found.anchor_source, progress)
    (account,) = [e for e in PromTextIngester().ingest(unit, ctx) if isinstance(e, Account)]
    assert len(calls) > 2
    assert calls == sorted(calls) and len(set(calls)) == len(calls)
    assert calls[-1] == (sum(p.stat().st_size for p in folder.iterdir()), account.lines_total)
