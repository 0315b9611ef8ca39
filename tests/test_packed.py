"""PackedStrings behaves as the tuple of its strings; FileList and discovery use it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdiag.analyzer.discovery.discover import discover
from kvdiag.analyzer.ingest.base import FileList
from kvdiag.analyzer.ingest.packed import PackedStrings
from tests.conftest import FIXTURES

SATURATION = FIXTURES / "vllm-b-saturation" / "incident"


@given(st.lists(st.text(max_size=12), max_size=30), st.integers(-40, 40))
def test_packed_strings_read_as_the_tuple_they_hold(items: list[str], i: int) -> None:
    packed = PackedStrings(items)
    as_tuple = tuple(items)
    assert len(packed) == len(as_tuple)
    assert list(packed) == items
    assert packed == as_tuple and as_tuple == packed and packed == items
    assert hash(packed) == hash(as_tuple)
    if -len(items) <= i < len(items):
        assert packed[i] == as_tuple[i]
    else:
        with pytest.raises(IndexError):
            packed[i]
    assert list(packed[1:-1:2]) == list(as_tuple[1:-1:2])
    for s in items:
        assert s in packed and packed.index(s) == as_tuple.index(s)


def test_packed_strings_differ_from_other_sequences() -> None:
    packed = PackedStrings(["ab", "c"])
    assert packed != ("a", "bc")  # same text, other boundaries
    assert packed != ("ab",)
    assert packed != "abc"
    assert repr(packed) == "PackedStrings(['ab', 'c'])"


def test_a_file_list_gives_paths_and_equals_their_sequence(tmp_path: Path) -> None:
    paths = [tmp_path / "a.prom", tmp_path / "b é.prom"]
    files = FileList(paths)
    assert files[1] == paths[1] and isinstance(files[1], Path)
    assert files == paths and files == [str(p) for p in paths]
    assert list(files[1:]) == paths[1:]
    assert hash(files) == hash(tuple(paths))


def test_discovery_packs_a_series_names_in_order() -> None:
    found = discover(SATURATION)
    series = next(u for u in found.units if len(u.files) > 1)
    assert isinstance(series.rels, PackedStrings)
    names = sorted(p.name for p in (SATURATION / "metrics").glob("*.prom"))
    assert list(series.rels) == [f"metrics/{n}" for n in names]
    assert [p.name for p in series.files] == names
