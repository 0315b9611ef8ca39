"""The line splitter under the log readers: every line kept, numbered, and read as text even
when its first bytes look like a compression header to polars."""

from __future__ import annotations

import pytest

from kvdiag.analyzer.ingest.lines import frame_lines


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
