"""Frames cross between DuckDB and polars as Arrow C streams (store/arrow_stream.py).

The crossing must give what DuckDB's own pyarrow crossing gives, type for type, and an
analysis must not load pyarrow at all (its libraries stay resident: ~33 MiB).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kvdiag.analyzer.schema import TABLES
from kvdiag.analyzer.store.arrow_stream import FrameStream, to_polars

# Every type the schema declares, the narrow types the rules ask for, and nulls of each.
_QUERY = """
SELECT * FROM (VALUES
  (1::BIGINT, 2::INTEGER, 0.5::DOUBLE, true, TIMESTAMP '2026-11-29 13:35:11.25', 'a',
   CAST('r1' AS ENUM('r0', 'r1')), 7::UINTEGER, 3::TINYINT, [1, 2], {'k': 1}),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
) t(big, int, dbl, flag, ts, txt, replica, row_id, tiny, list, rec)
"""


def test_the_schema_declares_only_types_checked_here() -> None:
    declared = {c.type for t in TABLES for c in t.columns}
    assert declared <= {"BIGINT", "INTEGER", "DOUBLE", "BOOLEAN", "TIMESTAMP", "VARCHAR"}


@pytest.mark.parametrize("where", ["", "WHERE big > 100"], ids=["rows", "empty"])
def test_a_result_reads_as_duckdbs_own_conversion_reads_it(where: str) -> None:
    pytest.importorskip("pyarrow")  # DuckDB's .pl() goes through pyarrow: the reference
    con = duckdb.connect()
    query = f"SELECT * FROM ({_QUERY}) {where}"
    assert_frame_equal(to_polars(con.sql(query)), con.sql(query).pl())


def test_a_large_result_keeps_duckdbs_chunks_and_every_row() -> None:
    con = duckdb.connect()
    frame = to_polars(con.sql("SELECT range AS x, 'r' || range AS s FROM range(500000)"))
    assert frame.height == 500_000
    assert frame["x"].sum() == 500_000 * 499_999 // 2
    assert frame.n_chunks() > 1  # handed over as DuckDB produced it, not copied into one


def test_a_registered_frame_is_inserted_and_read_back_unchanged() -> None:
    frame = pl.DataFrame(
        {
            "big": [1, None, 2**40],
            "int": pl.Series([1, 2, None], dtype=pl.Int32),
            "dbl": [0.5, None, -1e300],
            "flag": [True, None, False],
            "ts": [datetime(2026, 11, 29, 13, 35, 11, 250000), None, datetime(1970, 1, 1)],
            "txt": ["a", None, "é\u00a0x"],
        }
    )
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t (big BIGINT, int INTEGER, dbl DOUBLE, flag BOOLEAN, ts TIMESTAMP, "
        "txt VARCHAR)"
    )
    con.register("f", FrameStream(frame))
    con.execute("INSERT INTO t SELECT * FROM f")
    con.unregister("f")
    assert_frame_equal(to_polars(con.sql("SELECT * FROM t ORDER BY rowid")), frame)


def test_the_store_writes_and_reads_without_pyarrow() -> None:
    """In a fresh interpreter, so that nothing else has loaded pyarrow already."""
    code = (
        "import sys\n"
        "from kvdiag.analyzer.store.database import Store\n"
        "import polars as pl\n"
        "s = Store()\n"
        "s.append('input_problems', pl.DataFrame({'path': ['a'], 'line': [1], 'message': ['m']}))\n"
        "s.flush()\n"
        "print(s.reader.sql('SELECT count(*) AS n FROM input_problems')['n'][0])\n"
        "s.finish()\n"
        "print('pyarrow' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "False"]


def test_an_analysis_does_not_load_pyarrow() -> None:
    code = (
        "import sys\nfrom kvdiag.cli.main import main\n"
        "try:\n    main(['analyze', '--example', 'vllm-b-saturation', '-q', '-o', '/dev/null'])\n"
        "except SystemExit:\n    pass\n"
        "print('PYARROW', 'pyarrow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "PYARROW False" in done.stdout, done.stdout[-500:] + done.stderr[-2000:]
