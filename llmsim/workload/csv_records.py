"""CSV records that survive a field longer than Python csv's field size limit.

``csv.reader`` stops with ``field larger than field limit`` at the first field over ``csv.field_size_limit()``
(131,072 characters by default; the limit also stops a runaway unclosed quote from swallowing a whole file). The
limit is process-wide, so it is never raised here. Instead, when csv gives up on a record, :class:`CsvRecords` reads
its lines again and finds where that record really ends: a long quoted field may run over many lines, and resuming
csv at the next line would read its text as rows. The record is then one bad row (named by its first line and the
long field's column), and reading goes on with the next record.
"""

from __future__ import annotations

import csv
import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

FIELD_LIMIT_ERROR = "field larger than field limit"
QUOTE = '"'


def is_field_limit_error(err: csv.Error) -> bool:
    return str(err).startswith(FIELD_LIMIT_ERROR)


@dataclass(frozen=True)
class LongField:
    """A record csv refused: its first and last line, the 0-based field over the limit and the limit."""

    first_line: int
    last_line: int
    field: int | None  # None: not found again (the scan below and csv disagree); the message then names no column
    limit: int

    def message(self, path: object, names: list[str]) -> str:
        where = f"line {self.first_line}"
        if self.last_line > self.first_line:
            where = f"lines {self.first_line}-{self.last_line}"
        column = names[self.field] if self.field is not None and self.field < len(names) else "*"
        return (f"{path}: {where}, column {column!r}: expected a field of at most {self.limit} characters (the CSV "
                f"reader's field size limit), got a longer one")


class FieldScan:
    """Where the fields of one CSV record (default quoting: ``"``, doubled inside a quoted field) start and end,
    fed one line at a time; counts each field's characters as csv does, to find the first one over ``limit``."""

    def __init__(self, delimiter: str, limit: int) -> None:
        self.delimiter = delimiter
        self.limit = limit
        self.field = 0
        self.length = 0
        self.quoted = False
        self.at_start = True
        self.done = False  # the record ended at the end of the last line fed
        self.over: int | None = None  # the first field over the limit

    def _grow(self, n: int) -> None:
        self.length += n
        if self.over is None and self.length > self.limit:
            self.over = self.field

    def feed(self, line: str) -> None:
        end = len(line) - (2 if line.endswith("\r\n") else 1 if line.endswith(("\r", "\n")) else 0)
        pos = 0
        while True:
            if self.quoted:
                q = line.find(QUOTE, pos)
                if q < 0:  # the quoted field goes on (its line break included)
                    self._grow(len(line) - pos)
                    return
                self._grow(q - pos)
                if line.startswith(QUOTE, q + 1):  # a doubled quote: one quote character
                    self._grow(1)
                    pos = q + 2
                    continue
                self.quoted = False
                pos = q + 1  # text after a closing quote up to the delimiter is kept by csv, unquoted
            elif self.at_start and line.startswith(QUOTE, pos):
                self.quoted, self.at_start = True, False
                pos += 1
                continue
            self.at_start = False
            d = line.find(self.delimiter, pos, end)
            if d < 0:
                self._grow(max(end - pos, 0))
                self.done = True
                return
            self._grow(d - pos)
            self.field, self.length, self.at_start = self.field + 1, 0, True
            pos = d + 1


class CsvRecords:
    """``csv.reader`` over a text file (``reader``), with :meth:`skip_long_record` to step over a record csv refused
    for a field over its size limit. ``line_num`` counts every line read, also those skipped that way.

    The refused record's lines are read again from a second opening of the file, advanced only then (never more
    than one extra pass over the file), so a file without such a record is read exactly as by ``csv.reader``.
    """

    def __init__(self, open_text: Callable[[], IO[str]], delimiter: str) -> None:
        self._open = open_text
        self._text = open_text()
        self.reader = csv.reader(self._text, delimiter=delimiter)
        self.delimiter = delimiter
        self._skipped_lines = 0  # read past csv by skip_long_record
        self._again: IO[str] | None = None  # the second opening, at line _again_at
        self._again_at = 0

    @property
    def line_num(self) -> int:
        return self.reader.line_num + self._skipped_lines

    def close(self) -> None:
        self._text.close()
        if self._again is not None:
            self._again.close()

    def _lines_again(self, first: int, last: int) -> Iterator[str]:
        """Lines ``first``..``last`` (1-based) read again; ``first`` is past every line read again before."""
        if self._again is None:
            self._again = self._open()
        deque(itertools.islice(self._again, first - 1 - self._again_at), maxlen=0)
        self._again_at = last
        return itertools.islice(self._again, last - first + 1)

    def skip_long_record(self, first_line: int, to_end: bool) -> LongField:
        """After csv refused the record starting at ``first_line``: which field was too long and, with ``to_end``,
        read on to the record's last line, so that the reader's next record is the one after it."""
        scan = FieldScan(self.delimiter, csv.field_size_limit())
        for line in self._lines_again(first_line, self.line_num):
            scan.feed(line)
        while to_end and not scan.done:
            line = next(self._text, None)
            if line is None:  # an unclosed quote ran to the end of the file
                break
            self._skipped_lines += 1
            scan.feed(line)
        return LongField(first_line, self.line_num if to_end else first_line, scan.over, scan.limit)
