"""Lines stored by reference: read again from their file when cited.

A gigabyte of log holds hundreds of thousands of stats lines, and storing each one's text
was most of what DuckDB spent storing them; the rules cite a few dozen. While the store is
temporary and the files stay (the analysis reads them, then the store is discarded), the
fast lane's rows keep their file and line and leave `raw` NULL, and the file's batches are
recorded in `line_blocks` (first line, byte offset and length). A cited line is read from
its block as the reader read it (`lines.line_of`): one read of a block, no scan of the
file. A database kept with --db never holds such rows.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from kvdiag.analyzer.text.lines import line_of


@dataclass(frozen=True, slots=True)
class Blocks:
    """One file's blocks, in line order (columns of `line_blocks`)."""

    file_path: str
    first_line: tuple[int, ...]
    lines: tuple[int, ...]
    byte_offset: tuple[int, ...]
    byte_length: tuple[int, ...]

    def line(self, number: int) -> str | None:
        """Line `number` (1-based) as it was read, or None when no block holds it or the
        file can no longer be read."""
        i = bisect.bisect_right(self.first_line, number) - 1
        if i < 0 or number >= self.first_line[i] + self.lines[i]:
            return None
        try:
            fd = os.open(self.file_path, os.O_RDONLY)
        except OSError:
            return None
        try:
            block = os.pread(fd, self.byte_length[i], self.byte_offset[i])
        except OSError:
            return None
        finally:
            os.close(fd)
        return line_of(block, number - self.first_line[i])


BLOCKS_QUERY = (
    "SELECT file_path, first_line, lines, byte_offset, byte_length FROM line_blocks "
    "WHERE source_path = ? ORDER BY first_line"
)
