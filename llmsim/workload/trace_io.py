"""Opening trace files: compression by magic bytes, Parquet in batches, decoder failures as one TraceError line.

A trace path may be plain text, gzip / xz / bz2 compressed (recognised by the first bytes, so a compressed
file needs no particular suffix; a ``.gz`` / ``.xz`` / ``.bz2`` / ``.parquet`` suffix on a file that is not
that format is an error rather than a guess), or Parquet (CSV-style readers only). :class:`Table` gives the
CSV-style readers one interface over CSV and Parquet: the header names, then chunks of named columns with the
1-based line (CSV) or row (Parquet) of every value, so both formats share the row validation.

Decompressors fail deep inside iteration (a truncated ``.gz`` raises ``EOFError`` after thousands of good
rows); every such failure is caught here and reported as one line naming the file and the line where reading
stopped. Bytes that are not UTF-8 are kept as surrogate escapes and reported per row and column (or skipped
with ``on_error="skip"``), like any other malformed value.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import re
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llmsim.errors import TraceError, unique_keys
from llmsim.workload.base import WorkloadStats
from llmsim.workload.csv_records import CsvRecords, is_field_limit_error
from llmsim.workload.trace_values import RowError, reject, row_message

MAGIC = {"gzip": b"\x1f\x8b", "xz": b"\xfd7zXZ\x00", "bz2": b"BZh", "parquet": b"PAR1"}
SUFFIX_FORMAT = {".gz": "gzip", ".gzip": "gzip", ".xz": "xz", ".lzma": "xz", ".bz2": "bz2", ".parquet": "parquet",
                 ".pq": "parquet"}
UNSUPPORTED = {b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip", b"7z\xbc\xaf": "7z"}
# what a decompressor raises on a truncated / corrupt stream (BadGzipFile is an OSError)
DECODE_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)
# Text is decoded with errors="surrogateescape": a byte that is not UTF-8 becomes one of these code points,
# so reading never stops mid-chunk and the bad row (and column) is found exactly.
SURROGATES = re.compile("[\udc80-\udcff]+")
UNDECODABLE = "UTF-8 text"


def sniff(path: Path) -> str:
    """``plain``, ``gzip``, ``xz``, ``bz2`` or ``parquet``, from the first bytes (checked against the suffix)."""
    if not path.exists():
        raise TraceError(f"{path}: trace file not found")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory; expected a trace file")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise TraceError(f"{path}: cannot be read ({e.strerror or e}); expected a readable trace file") from None
    if not head:
        return "plain"  # each reader reports an empty file in its own terms
    fmt = next((name for name, magic in MAGIC.items() if head.startswith(magic)), "plain")
    for magic, name in UNSUPPORTED.items():
        if head.startswith(magic):
            raise TraceError(f"{path}: is {name}-compressed; expected plain text, gzip, xz, bz2 or Parquet")
    by_suffix = SUFFIX_FORMAT.get(path.suffix.lower())
    if by_suffix is not None and by_suffix != fmt:
        raise TraceError(f"{path}: line 1: expected {by_suffix} data (the name ends in {path.suffix}), got a file "
                         f"starting with {head[:8]!r}")
    return fmt


def base_suffix(path: Path) -> str:
    """The suffix under any compression suffix: ``.jsonl`` for ``trace.jsonl.gz``."""
    suffixes = [s.lower() for s in path.suffixes]
    while suffixes and SUFFIX_FORMAT.get(suffixes[-1]) in ("gzip", "xz", "bz2"):
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def open_binary(path: Path, fmt: str) -> IO[bytes]:
    """The decompressed byte stream of a text trace."""
    try:
        if fmt == "gzip":
            return gzip.open(path, "rb")
        if fmt == "xz":
            return lzma.open(path, "rb")
        if fmt == "bz2":
            return bz2.open(path, "rb")
        return open(path, "rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot be read ({e.strerror or e}); expected a readable trace file") from None


@contextmanager
def open_text(path: Path, newline: str | None = None) -> Iterator[tuple[IO[str], str]]:
    """(text stream, format) of a plain or compressed UTF-8 file; bad bytes become surrogates (:func:`undecodable`)."""
    fmt = sniff(path)
    if fmt == "parquet":
        raise TraceError(f"{path}: is a Parquet file; expected a text file (this reader reads JSON lines)")
    text = io.TextIOWrapper(open_binary(path, fmt), encoding="utf-8-sig", errors="surrogateescape",
                            newline=newline)
    try:
        yield text, fmt
    finally:
        text.close()


def one_line(err: BaseException) -> str:
    """``Type: message`` of a decoder's exception on one line (pyarrow's messages span several)."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]


def undecodable(text: str) -> tuple[int, bytes] | None:
    """(character offset, raw bytes) of the first byte that was not UTF-8 (decoded with surrogateescape)."""
    if text.isascii():  # the common case, checked at C speed
        return None
    m = SURROGATES.search(text)
    if m is None:
        return None
    return m.start(), m.group().encode("utf-8", "surrogateescape")


def undecodable_message(path: Path, where: str, column: str, raw: bytes) -> str:
    return f"{path}: {where}, column {column!r}: expected {UNDECODABLE}, got undecodable bytes {raw[:16]!r}"


_JSON_LINE = json.JSONDecoder(object_pairs_hook=unique_keys)  # built once: json.loads(hook=) builds one per call


def json_line(line: str) -> Any:
    """One JSONL line's value as ``json.loads`` gives it, but a key named twice in an object raises
    :class:`~llmsim.errors.DuplicateJSONKey` (a few per cent of a trace's parse time, the hook runs once per object)."""
    if line.startswith("\ufeff"):
        return json.loads(line)  # json.loads' own "Unexpected UTF-8 BOM" error
    return _JSON_LINE.decode(line)


def duplicate_key_message(path: Path, where: str, key: str) -> str:
    return (f"{path}: {where}, column {key!r}: expected each key once per line, got it twice (JSON would keep "
            f"only the last value)")


def decode_failure(path: Path, fmt: str, err: BaseException, next_line: int) -> TraceError:
    """One line for a decompression failure met while reading line ``next_line``."""
    return TraceError(f"{path}: line {next_line}: expected a complete {fmt} file, got a truncated or corrupt "
                      f"{fmt} stream ({one_line(err)}); the lines before were read")


class Table:
    """A CSV (plain or compressed) or Parquet file read as header names + chunks of named columns.

    ``read(select, numeric, stats, on_error)`` opens the file, passes the header names and where they are
    (``"line 1 (header)"`` / ``"Parquet schema"``) to ``select`` (which returns the columns wanted, raising
    TraceError if one is missing) and yields ``(columns, positions, unit)`` chunks of at most ``chunk_rows``
    rows: ``columns`` maps each wanted name to its values (strings for CSV;
    numbers / datetime64 / strings for Parquet, with every column not in ``numeric`` as strings), and
    ``positions`` the 1-based line (CSV) or row (Parquet) of each. Blank CSV lines and rows with the wrong
    number of fields, or a field longer than csv's field size limit, are counted or rejected here;
    ``stats.rows_read`` counts the data rows.
    """

    def __init__(self, path: str | Path, delimiter: str = ",", chunk_rows: int = 8192) -> None:
        self.path = Path(path)
        self.delimiter = delimiter
        self.chunk_rows = chunk_rows
        self.first_row = "line 2"  # where the first data row is (set by read: "row 1" for Parquet)

    def read(self, select: Callable[[list[str], str], list[str]], numeric: Collection[str] | None,
             stats: WorkloadStats, on_error: str) -> Iterator[tuple[dict[str, Sequence[Any]], list[int], str]]:
        """Yields ``(columns, positions, unit)`` with unit ``"line"`` (CSV) or ``"row"`` (Parquet);
        ``numeric=None``: every wanted column is numeric."""
        fmt = sniff(self.path)
        self.first_row = "row 1" if fmt == "parquet" else "line 2"
        if fmt == "parquet":
            yield from self._read_parquet(select, None if numeric is None else set(numeric), stats)
        else:
            yield from self._read_csv(fmt, select, stats, on_error)

    # -- CSV -----------------------------------------------------------------------------------
    def _read_csv(self, fmt: str, select: Callable[[list[str], str], list[str]], stats: WorkloadStats,
                  on_error: str) -> Iterator[tuple[dict[str, Sequence[Any]], list[int], str]]:
        path = self.path
        records = CsvRecords(lambda: io.TextIOWrapper(open_binary(path, fmt), encoding="utf-8-sig",
                                                      errors="surrogateescape", newline=""), self.delimiter)
        try:
            names = self._csv_header(records.reader)
            wanted = select(names, "line 1 (header)")
            index = [names.index(c) for c in wanted]
            for rows, lines in self._csv_batches(records, names, stats, on_error):
                chunk = self._csv_chunk(rows, lines, len(names), wanted, index, stats, on_error)
                if chunk is not None:
                    yield chunk
        except csv.Error as e:
            raise TraceError(f"{path}: line {records.line_num}: expected well-formed CSV, got {e}") from None
        except DECODE_ERRORS as e:
            raise decode_failure(path, fmt, e, records.line_num + 1) from None
        finally:
            records.close()

    def _csv_header(self, reader: Iterator[list[str]]) -> list[str]:
        path = self.path
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path}: line 1: expected a header row, got an empty file")
        names = [h.strip() for h in header]
        if not any(names):
            raise TraceError(f"{path}: line 1: expected a header row of column names, got a blank line")
        bad = undecodable("\x1f".join(names))
        if bad is not None:
            raise TraceError(f"{path}: line 1 (header): expected {UNDECODABLE}, got undecodable bytes {bad[1]!r} "
                             f"(is this a binary or differently encoded file?)")
        return names

    def _csv_batches(self, records: CsvRecords, names: list[str], stats: WorkloadStats,
                     on_error: str) -> Iterator[tuple[list[list[str]], list[int]]]:
        """The data records in batches of ``chunk_rows``, with the line of each. A record with a field over csv's
        size limit is rejected (or skipped and counted) after the rows before it, and reading goes on after it."""
        reader = records.reader
        rows: list[list[str]] = []
        lines: list[int] = []
        offset, last = 0, reader.line_num  # lines read past csv; the last line of the records passed on
        while True:
            try:
                for row in reader:
                    rows.append(row)
                    lines.append(reader.line_num + offset)
                    if len(rows) >= self.chunk_rows:
                        last = lines[-1]
                        yield rows, lines
                        rows, lines = [], []
                break
            except csv.Error as e:
                if not is_field_limit_error(e):
                    raise
                first = (lines[-1] if lines else last) + 1
            if rows:
                yield rows, lines
                rows, lines = [], []
            long = records.skip_long_record(first, to_end=on_error == "skip")
            stats.rows_read += 1
            reject(stats, on_error, long.message(self.path, names))
            offset, last = records.line_num - reader.line_num, long.last_line
        if rows:
            yield rows, lines

    def _csv_chunk(self, rows: list[list[str]], lines: list[int], ncols: int, wanted: list[str], index: list[int],
                   stats: WorkloadStats, on_error: str) -> tuple[dict[str, Sequence[Any]], list[int], str] | None:
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        blank = lens == 0
        if blank.any():
            stats.skip("blank_line", int(blank.sum()))
        stats.rows_read += int((~blank).sum())
        for i in np.flatnonzero((lens != ncols) & ~blank).tolist():
            err = RowError(i, "*", f"{ncols} fields as in the header", f"{len(rows[i])} fields")
            reject(stats, on_error, row_message(self.path, f"line {lines[i]}", err.column, err.expected, err.got))
        keep = np.flatnonzero(lens == ncols)
        if keep.size < len(rows):
            rows = [rows[i] for i in keep.tolist()]
            lines = [lines[i] for i in keep.tolist()]
        if not rows:
            return None
        transposed = list(zip(*rows))
        cols = {c: transposed[i] for c, i in zip(wanted, index)}
        return self._drop_undecodable(cols, lines, stats, on_error)

    def _drop_undecodable(self, cols: dict[str, Sequence[Any]], lines: list[int], stats: WorkloadStats,
                          on_error: str) -> tuple[dict[str, Sequence[Any]], list[int], str] | None:
        """Reject (or skip) rows whose wanted values hold bytes that were not UTF-8; one regex pass per column."""
        bad_rows: set[int] = set()
        for c, values in cols.items():
            if undecodable("\x1f".join(values)) is None:
                continue
            for i, v in enumerate(values):
                found = undecodable(v)
                if found is not None and i not in bad_rows:
                    reject(stats, on_error, undecodable_message(self.path, f"line {lines[i]}", c, found[1]))
                    bad_rows.add(i)
        if not bad_rows:
            return cols, lines, "line"
        keep = [i for i in range(len(lines)) if i not in bad_rows]
        if not keep:
            return None
        return {c: [v[i] for i in keep] for c, v in cols.items()}, [lines[i] for i in keep], "line"

    # -- Parquet -------------------------------------------------------------------------------
    def _read_parquet(self, select: Callable[[list[str], str], list[str]], numeric: set[str] | None,
                      stats: WorkloadStats) -> Iterator[tuple[dict[str, Sequence[Any]], list[int], str]]:
        path = self.path
        errors = (pa.ArrowException, OSError, ValueError)
        try:
            pf = pq.ParquetFile(path)
            names = list(pf.schema_arrow.names)
        except errors as e:
            raise TraceError(f"{path}: row 1: expected a readable Parquet file, got {one_line(e)}") from None
        wanted = list(dict.fromkeys(select(names, "Parquet schema")))
        row = 0
        try:
            batches = pf.iter_batches(batch_size=self.chunk_rows, columns=wanted)
            for batch in batches:
                n = batch.num_rows
                if n == 0:
                    continue
                cols = {c: _arrow_values(batch.column(i), numeric is None or c in numeric)
                        for i, c in enumerate(wanted)}
                stats.rows_read += n
                yield cols, list(range(row + 1, row + n + 1)), "row"
                row += n
        except errors as e:
            raise TraceError(f"{path}: row {row + 1}: expected readable Parquet data, got {one_line(e)}") from None
        finally:
            pf.close()


def _arrow_values(arr: Any, numeric: bool) -> Sequence[Any]:
    """One Parquet column as numpy (numbers, datetime64 in UTC) or, for text columns, Python strings."""
    t = arr.type
    if not numeric:
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return arr.to_pylist()
        return [None if v is None else str(v) for v in arr.to_pylist()]
    if arr.null_count:
        return arr.to_pylist()  # nulls stay None, so the error says "null" rather than "nan"
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            arr = arr.cast(pa.timestamp("ns", tz="UTC"))
        return arr.to_numpy(zero_copy_only=False).astype("datetime64[ns]")
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64) if pa.types.is_decimal(t) \
            else arr.to_numpy(zero_copy_only=False)
    if pa.types.is_boolean(t):
        return arr.to_numpy(zero_copy_only=False)  # refused by the number parser: True is not a count
    return arr.to_pylist()
