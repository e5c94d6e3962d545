"""A CSV field over Python csv's field size limit (131,072 characters) is one bad row, not the end of the read.

Before, csv's ``field larger than field limit`` stopped the whole read, also with ``on_error: skip``. Now the
row is named (file, line, column) in strict mode, and skipped and counted in skip mode, with the rows after it
read at their right lines, also after a long quoted field that runs over several lines.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from llmsim.errors import TraceError
from llmsim.workload import BurstGPTTrace, CsvTrace

LIMIT = csv.field_size_limit()
LONG = "y" * (LIMIT + 1)
# a quoted field over the limit running over 4 lines, holding commas, doubled quotes and lines that look like rows
LONG_QUOTED = '"' + "x" * LIMIT + '\n9,9,9,""not a row""\n"",\n8,8,8,z"'
pytestmark = pytest.mark.timeout(60, method="thread")


def write(path: Path, body: str) -> Path:
    data = ("t,p,o,note\n" + body).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("name", ["trace.csv", "trace.csv.gz"])
def test_strict_mode_names_the_file_line_and_column(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, f"0,5,5,a\n1,6,6,{LONG}\n2,7,7,b\n")
    with pytest.raises(TraceError) as e:
        list(CsvTrace(path, "t", "p", "o"))
    assert str(e.value) == (f"{path}: line 3, column 'note': expected a field of at most {LIMIT} characters (the CSV "
                            "reader's field size limit), got a longer one")
    assert csv.field_size_limit() == LIMIT  # the process-wide limit is left alone


def test_strict_mode_reports_an_earlier_bad_row_first(tmp_path: Path) -> None:
    path = write(tmp_path / "trace.csv", f"0,5,5,a\n1,-6,6,b\n2,7,7,{LONG}\n")
    with pytest.raises(TraceError, match=r"line 3, column 'p': expected an integer token count"):
        list(CsvTrace(path, "t", "p", "o"))


@pytest.mark.parametrize("name", ["trace.csv", "trace.csv.gz"])
@pytest.mark.parametrize("chunk_rows", [1, 2, 100])
def test_skip_mode_skips_the_row_and_reads_on_at_the_right_lines(tmp_path: Path, name: str, chunk_rows: int) -> None:
    body = f"0,5,5,a\n1,6,6,{LONG}\n2,7,7,b\n3,8,8,{LONG_QUOTED}\n4,9,9,c\n5,abc,9,d\n6,10,10,e\n"
    path = write(tmp_path / name, body)
    wl = CsvTrace(path, "t", "p", "o", task="note", on_error="skip", chunk_rows=chunk_rows)
    got = [(r.arrival, r.prompt_tokens, r.task) for r in wl]
    assert got == [(0.0, 5, "a"), (2.0, 7, "b"), (4.0, 9, "c"), (6.0, 10, "e")]
    assert wl.stats.skipped == {"malformed": 3}
    assert wl.stats.rows_read == 7
    assert [e.split(": ", 2)[1] for e in wl.stats.errors] == ["line 3, column 'note'", "lines 5-8, column 'note'",
                                                              "line 10, column 'p'"]  # lines after the skip are right
    assert csv.field_size_limit() == LIMIT


def test_skip_mode_unclosed_quote_is_one_row_to_the_end_of_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "trace.csv", '0,5,5,a\n1,6,6,"' + "x" * LIMIT + "\n2,7,7,b\n3,8,8,c\n")
    wl = CsvTrace(path, "t", "p", "o", on_error="skip")
    assert [r.prompt_tokens for r in wl] == [5]
    assert wl.stats.skipped == {"malformed": 1} and "lines 3-5, column 'note'" in wl.stats.errors[0]


def test_burstgpt_row_with_a_long_model_name_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "BurstGPT_1.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,10,4,14,API log\n"
                    f"6,{LONG},10,4,14,API log\n"
                    "7,GPT-4,12,3,15,API log\n")
    with pytest.raises(TraceError, match=r"BurstGPT_1\.csv: line 3, column 'Model': expected a field of at most"):
        list(BurstGPTTrace(path))
    wl = BurstGPTTrace(path, on_error="skip")
    assert [(r.arrival, r.prompt_tokens) for r in wl] == [(0.0, 10), (2.0, 12)]
    assert wl.stats.skipped == {"malformed": 1}
