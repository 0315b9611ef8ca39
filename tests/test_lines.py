"""The line splitter under the log readers: every line kept, numbered, and read as text even
when its first bytes look like a compression header to polars."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.ingest.metrics.scrape_files import read_batch
from kvdiag.analyzer.text.lines import frame_lines


@pytest.mark.parametrize("magic", [b"x^", b"x\x9c", b"x\xda", b"x\x01", b"\x28\xb5\x2f\xfd"])
def test_text_starting_like_compressed_data_is_read_as_text(magic: bytes) -> None:
    chunk = magic + b" first\n" + magic + b" second\n\nlast"
    frame = frame_lines(chunk, 10)
    assert frame["line_no"].to_list() == [10, 11, 12, 13]
    texts = frame["text"].to_list()
    assert texts[1:] == [magic.decode("utf-8", "replace") + " second", "", "last"]
    assert texts[0].endswith(" first")


def test_line_limit_holds_on_the_split_path() -> None:
    frame = frame_lines(b"x^a\nb\nc\nd\n", 1, lines=2)
    assert frame.rows() == [(1, "x^a"), (2, "b")]


def test_plain_text_unchanged() -> None:
    assert frame_lines(b"one\ntwo\n", 1).rows() == [(1, "one"), (2, "two")]


_BOM = b"\xef\xbb\xbf"
# Scrape files as read_batch joins them: any bytes, CRLF, invalid UTF-8, the separator
# byte, empty files, files without a final newline.
_file_bytes = st.lists(
    st.sampled_from(
        [b"a", b"x 1", b"\r", b"\n", b"\xff\xfe", b"\x1f", b"\xe2\x82", b"\xc3\xa9", _BOM]
    ),
    max_size=12,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_file_bytes, min_size=1, max_size=6))
def test_a_batch_locates_every_line_in_its_file(
    tmp_path_factory: pytest.TempPathFactory, files: list[bytes]
) -> None:
    folder = tmp_path_factory.mktemp("batch")
    paths = []
    for i, data in enumerate(files):
        path = folder / f"{1700000000 + i}.prom"
        path.write_bytes(data)
        paths.append(path)
    batch = read_batch(paths, [p.name for p in paths])
    located = batch.locate(batch.lines)
    read = [data.removeprefix(_BOM) for data in files]  # a file's byte-order mark is dropped
    expected = [
        (p.name, n + 1, line.decode("utf-8", "replace").replace("\x1f", " ").rstrip("\r"))
        for p, data in zip(paths, read, strict=True)
        for n, line in enumerate(
            data.split(b"\n")[: data.count(b"\n") + (not data.endswith(b"\n") and bool(data))]
        )
    ]
    if expected and expected[0][2].startswith("\ufeff"):  # so is a second one first in a batch
        expected[0] = (*expected[0][:2], expected[0][2][1:])
    got = list(located.select("source_path", "source_line", "text").iter_rows())
    assert got == expected


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux's /proc")
def test_a_file_longer_than_its_stated_size_is_read_whole() -> None:
    # /proc files state a size of 0 and hold more, as a scrape still being written can.
    batch = read_batch([Path("/proc/self/status")], ["status"])
    first = batch.lines["text"].to_list()[:3]
    assert first[0].startswith("Name:") and first[2].startswith("State:")
    assert batch.lines.height > 20


def test_an_unreadable_file_is_a_problem_and_the_others_keep_their_lines(tmp_path: Path) -> None:
    first, second = tmp_path / "1.prom", tmp_path / "3.prom"
    first.write_bytes(b"a 1\nb 2\n")
    second.write_bytes(b"c 3")
    broken = tmp_path / "2.prom"
    broken.mkdir()  # open() fails on a folder
    paths = [first, broken, second]
    batch = read_batch(paths, [p.name for p in paths])
    located = batch.locate(batch.lines).select("source_path", "source_line", "text")
    assert located.rows() == [("1.prom", 1, "a 1"), ("1.prom", 2, "b 2"), ("3.prom", 1, "c 3")]
    assert len(batch.problems) == 1 and batch.problems[0].startswith("2.prom: unreadable")
