"""Bad-input corpus of the trace readers: one test per class of bad input, for every reader format.

Each case asserts the exception type (TraceError, never a decoder's own exception), that the one-line
message names the file, the line / row and the column where they exist, and that it fails fast.
Formats: Azure CSV, BurstGPT CSV, generic CSV (plain, gzip), generic Parquet, Mooncake JSONL (plain, xz).
"""

from __future__ import annotations

import gzip
import lzma
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmsim.errors import ConfigError, TraceError
from llmsim.workload import AzureTrace, BurstGPTTrace, CsvTrace, Empirical, MooncakeTrace, Workload, build_workload

GOOD = [(0, "10", "5"), (1, "20", "6"), (2, "30", "7")]  # (arrival s, prompt, output); bad values go in row 2
HANG_S = 60  # every test here reads a tiny file: one that takes this long hangs (a pytest-timeout, no clock assert)
pytestmark = pytest.mark.timeout(HANG_S, method="thread")


@dataclass(frozen=True)
class Fmt:
    name: str
    filename: str
    reader: Callable[..., Workload]  # reader(path, on_error=...)
    prompt: str  # the prompt column's name
    arrival: str
    unit: str  # "line" or "row"
    first: int  # position of the first data row
    encode: Callable[[list[tuple[object, str, str]], bytes], bytes] | None  # rows, header override -> file bytes

    def pos(self, i: int) -> str:
        return f"{self.unit} {self.first + i}"


def _csv(header: str, row: Callable[[object, str, str], str]) -> Callable[[list[tuple[object, str, str]], bytes],
                                                                           bytes]:
    def encode(rows: list[tuple[object, str, str]], head: bytes = b"") -> bytes:
        return (head or header.encode()) + b"\n" + b"".join(row(*r).encode("utf-8", "surrogateescape") + b"\n"
                                                            for r in rows)
    return encode


def _azure_time(t: object) -> str:
    return f"2023-11-16 18:15:{int(t):02d}.5000000" if isinstance(t, int) else str(t)


def _jsonl(rows: list[tuple[object, str, str]], head: bytes = b"") -> bytes:
    lines = []
    for t, p, o in rows:
        ts = str(int(t) * 1000) if isinstance(t, int) else t
        lines.append(f'{{"timestamp": {ts}, "input_length": {p}, "output_length": {o}, "hash_ids": [1]}}')
    return head + "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")


def _parquet_bytes(rows: list[tuple[object, str, str]], head: bytes = b"") -> bytes:
    names = head.decode().split(",") if head else ["t", "p", "o"]
    cols = list(zip(*rows)) if rows else [[], [], []]
    table = pa.table({n: pa.array([str(v) for v in c], type=pa.string()) for n, c in zip(names, cols)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


FORMATS = [
    Fmt("azure_csv", "AzureLLMInferenceTrace_conv.csv", AzureTrace, "ContextTokens", "TIMESTAMP", "line", 2,
        _csv("TIMESTAMP,ContextTokens,GeneratedTokens", lambda t, p, o: f"{_azure_time(t)},{p},{o}")),
    Fmt("burstgpt_csv", "BurstGPT_1.csv", BurstGPTTrace, "Request tokens", "Timestamp", "line", 2,
        _csv("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
             lambda t, p, o: f"{t},ChatGPT,{p},{o},0,Conversation log")),
    Fmt("generic_csv", "trace.csv", lambda p, **kw: CsvTrace(p, "t", "p", "o", **kw), "p", "t", "line", 2,
        _csv("t,p,o", lambda t, p, o: f"{t},{p},{o}")),
    Fmt("generic_csv_gz", "trace.csv.gz", lambda p, **kw: CsvTrace(p, "t", "p", "o", **kw), "p", "t", "line", 2,
        lambda rows, head=b"": gzip.compress(_csv("t,p,o", lambda t, p, o: f"{t},{p},{o}")(rows, head))),
    Fmt("generic_parquet", "trace.parquet", lambda p, **kw: CsvTrace(p, "t", "p", "o", **kw), "p", "t", "row", 1,
        _parquet_bytes),
    Fmt("mooncake_jsonl", "conversation_trace.jsonl", MooncakeTrace, "input_length", "timestamp", "line", 1,
        _jsonl),
    Fmt("mooncake_jsonl_xz", "conversation_trace.jsonl.xz", MooncakeTrace, "input_length", "timestamp", "line", 1,
        lambda rows, head=b"": lzma.compress(_jsonl(rows, head))),
]
CSV_LIKE = [f for f in FORMATS if not f.name.startswith("mooncake")]
IDS = [f.name for f in FORMATS]


def write(tmp_path: Path, fmt: Fmt, rows: list[tuple[object, str, str]], head: bytes = b"") -> Path:
    path = tmp_path / fmt.filename
    assert fmt.encode is not None
    path.write_bytes(fmt.encode(rows, head))
    return path


@contextmanager
def one_clear_line(path: Path, *parts: str) -> Iterator[None]:
    """TraceError, one line, naming the file and every part, without a chained traceback (raised fast: the module's
    tests run under a hang bound, :data:`HANG_S`)."""
    with pytest.raises(TraceError) as exc:
        yield
    msg = str(exc.value)
    assert type(exc.value) is TraceError
    assert "\n" not in msg and msg.startswith(str(path)), msg
    for part in parts:
        assert part in msg, (part, msg)
    assert exc.value.__cause__ is None  # no decoder traceback chained to the message
    assert exc.value.__context__ is None or exc.value.__suppress_context__


def good_reads(fmt: Fmt, tmp_path: Path) -> None:
    """The corpus writer itself produces a readable file (so the failures below are the bad value's)."""
    reqs = list(fmt.reader(write(tmp_path, fmt, GOOD)))
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(10, 5), (20, 6), (30, 7)]


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_corpus_writer_is_valid(tmp_path: Path, fmt: Fmt) -> None:
    good_reads(fmt, tmp_path)


# -- whole-file classes ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_directory(tmp_path: Path, fmt: Fmt) -> None:
    path = tmp_path / fmt.filename
    path.mkdir()
    with one_clear_line(path, "is a directory"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_missing_file(tmp_path: Path, fmt: Fmt) -> None:
    path = tmp_path / fmt.filename
    with one_clear_line(path, "not found"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_empty_file(tmp_path: Path, fmt: Fmt) -> None:
    path = tmp_path / fmt.filename
    path.write_bytes(b"")
    with one_clear_line(path, "line 1", "empty" if fmt in CSV_LIKE else "no data"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_header_only_or_no_data(tmp_path: Path, fmt: Fmt) -> None:
    path = write(tmp_path, fmt, [])
    if fmt.name.startswith("mooncake"):  # JSONL has no header: only blank lines
        path.write_bytes(fmt.encode([], b"\n\n") if fmt.encode else b"")
    with one_clear_line(path, fmt.pos(0), "got none", "no data"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", CSV_LIKE, ids=[f.name for f in CSV_LIKE])
@pytest.mark.parametrize("renamed", [False, True], ids=["missing", "renamed"])
def test_missing_or_renamed_column(tmp_path: Path, fmt: Fmt, renamed: bool) -> None:
    header = {"azure_csv": "TIMESTAMP,{},GeneratedTokens",
              "burstgpt_csv": "Timestamp,Model,{},Response tokens,Total tokens,Log Type"}.get(fmt.name, "t,{},o")
    other = {"azure_csv": "Context Tokens", "burstgpt_csv": "request_tokens"}.get(fmt.name, "P") if renamed else "zzz"
    path = write(tmp_path, fmt, GOOD, header.format(other).encode())
    where = "Parquet schema" if fmt.unit == "row" else "line 1 (header)"
    hint = [f"did you mean {other!r}"] if renamed else []
    with one_clear_line(path, where, f"missing column {fmt.prompt!r}", *hint):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.name.startswith("mooncake")], ids=["plain", "xz"])
def test_jsonl_missing_key(tmp_path: Path, fmt: Fmt) -> None:
    path = tmp_path / fmt.filename
    text = '{"timestamp": 0, "input_length": 3, "output_length": 2}\n{"timestamp": 1, "output_length": 2}\n'
    path.write_bytes(lzma.compress(text.encode()) if fmt.filename.endswith(".xz") else text.encode())
    with one_clear_line(path, "line 2", "'input_length'", "no such key"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.name.startswith("mooncake")], ids=["plain", "xz"])
def test_jsonl_hash_ids_that_do_not_cover_the_prompt(tmp_path: Path, fmt: Fmt) -> None:
    """The engine caches the blocks a request's ids name: ids too few for input_length are a bad row, not a crash."""
    path = tmp_path / fmt.filename
    text = ('{"timestamp": 0, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]}\n'
            '{"timestamp": 1, "input_length": 1025, "output_length": 2, "hash_ids": [1, 2]}\n')
    path.write_bytes(lzma.compress(text.encode()) if fmt.filename.endswith(".xz") else text.encode())
    with one_clear_line(path, "line 2", "'hash_ids'", "at least 3 ids", "input_length 1025", "2 ids"):
        list(fmt.reader(path))
    wl = fmt.reader(path, on_error="skip")
    assert [r.prompt_tokens for r in wl] == [1024] and wl.stats.skipped == {"malformed": 1}


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_binary_garbage(tmp_path: Path, fmt: Fmt) -> None:
    path = tmp_path / fmt.filename
    path.write_bytes(bytes(range(128, 256)) * 8 + b"\n" + bytes(range(256)) * 4)
    with one_clear_line(path, "line 1", "expected"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.unit == "line"], ids=[f.name for f in FORMATS
                                                                                if f.unit == "line"])
def test_bad_utf8_in_a_row(tmp_path: Path, fmt: Fmt) -> None:
    rows = [GOOD[0], (1, "2\udcff\udcfe0", "6"), GOOD[2]]  # surrogate escapes are written as the raw bytes ff fe
    path = write(tmp_path, fmt, rows)
    column = repr(fmt.prompt) if fmt in CSV_LIKE else "'(JSON text)'"
    with one_clear_line(path, fmt.pos(1), column, "UTF-8", "\\xff\\xfe"):
        list(fmt.reader(path))
    wl = fmt.reader(path, on_error="skip")  # a bad row is skippable like any malformed row
    assert [r.prompt_tokens for r in wl] == [10, 30] and wl.stats.skipped == {"malformed": 1}


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.filename.endswith((".gz", ".xz"))], ids=["gz", "xz"])
def test_truncated_compressed_file(tmp_path: Path, fmt: Fmt) -> None:
    rows = [(i, str(10 + i % 50), "3") for i in range(3000)]
    path = write(tmp_path, fmt, rows)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with one_clear_line(path, "line ", "truncated or corrupt"):
        list(fmt.reader(path))


@pytest.mark.parametrize("suffix", [".gz", ".xz", ".bz2", ".parquet"])
def test_suffix_that_lies_about_the_format(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"trace.csv{suffix}"
    path.write_text("t,p,o\n0,1,1\n")
    with one_clear_line(path, "line 1", "expected", "the name ends in"):
        list(CsvTrace(path, "t", "p", "o"))


# -- one bad value (row 2 of 3) ------------------------------------------------------------------

# (case id, value in the CSV / Parquet text, value as a JSON literal)
BAD_VALUES = [
    ("nan", "nan", "NaN"),
    ("infinity", "Infinity", "Infinity"),
    ("negative", "-5", "-5"),
    ("non_numeric", "abc", '"abc"'),
    ("absurd", "1e30", "1e30"),
    ("fractional", "12.5", "12.5"),
    ("empty", "", "null"),
    ("boolean", "true", "true"),
]


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
@pytest.mark.parametrize(("case", "text", "json_text"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_bad_token_count(tmp_path: Path, fmt: Fmt, case: str, text: str, json_text: str) -> None:
    value = json_text if fmt.name.startswith("mooncake") else text
    path = write(tmp_path, fmt, [GOOD[0], (1, value, "6"), GOOD[2]])
    expected = "expected an integer token count in [0, 100000000]"
    with one_clear_line(path, fmt.pos(1), f"column {fmt.prompt!r}", expected):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
@pytest.mark.parametrize(("case", "text", "json_text"),
                         [("unparseable", "not-a-time", '"not-a-time"'), ("nan", "nan", "NaN"),
                          ("infinity", "inf", "Infinity"), ("empty", "", "null")],
                         ids=["unparseable", "nan", "infinity", "empty"])
def test_bad_arrival_time(tmp_path: Path, fmt: Fmt, case: str, text: str, json_text: str) -> None:
    value = json_text if fmt.name.startswith("mooncake") else text
    path = write(tmp_path, fmt, [GOOD[0], (value, "20", "6"), GOOD[2]])
    with one_clear_line(path, fmt.pos(1), f"column {fmt.arrival!r}", "expected"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.name in ("burstgpt_csv", "generic_csv", "generic_parquet",
                                                                    "mooncake_jsonl")],
                         ids=["burstgpt_csv", "generic_csv", "generic_parquet", "mooncake_jsonl"])
def test_arrival_past_the_simulated_horizon_names_the_row(tmp_path: Path, fmt: Fmt) -> None:
    # 1e300 s after the first row: no float64 clock resolves a step there; the reader says which row, not the cluster
    # (a Mooncake timestamp is in ms: 2e15 ms is 2e12 s, past the horizon yet exact as a float)
    path = write(tmp_path, fmt, [GOOD[0], ("1e300" if fmt in CSV_LIKE else "2000000000000000", "20", "6"), GOOD[2]])
    horizon = "simulated horizon" if fmt in CSV_LIKE else "in [0, 1000000000000000]"
    with one_clear_line(path, fmt.pos(1), f"column {fmt.arrival!r}", horizon):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_arrival_before_the_previous_row(tmp_path: Path, fmt: Fmt) -> None:
    path = write(tmp_path, fmt, [GOOD[0], (3, "20", "6"), (1, "30", "7")])
    with one_clear_line(path, fmt.pos(2), f"column {fmt.arrival!r}", "previous row"):
        list(fmt.reader(path))


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_skip_mode_counts_every_bad_row_by_reason(tmp_path: Path, fmt: Fmt) -> None:
    path = write(tmp_path, fmt, [(1, "10", "5"), (2, "abc" if fmt in CSV_LIKE else '"abc"', "6"), (3, "1e30", "7"),
                                 (0, "30", "7"), (4, "40", "0"), (5, "0", "8"), (6, "50", "9")])
    wl = fmt.reader(path, on_error="skip")
    reqs = list(wl)
    assert [(r.id, r.prompt_tokens) for r in reqs] == [(0, 10), (1, 50)]
    assert wl.stats.skipped == {"malformed": 2, "out_of_order": 1, "zero_output_tokens": 1,
                                "zero_prompt_tokens": 1}
    assert wl.stats.rows_read == 7 and len(wl.stats.errors) == 3
    assert fmt.pos(1) in wl.stats.errors[0] and fmt.pos(2) in wl.stats.errors[1]
    assert fmt.pos(3) in wl.stats.errors[2] and "previous row" in wl.stats.errors[2]


@pytest.mark.parametrize("damage", ["truncated", "corrupt_pages"])
def test_damaged_parquet(tmp_path: Path, damage: str) -> None:
    fmt = next(f for f in FORMATS if f.name == "generic_parquet")
    path = write(tmp_path, fmt, [(i, str(1 + i), "2") for i in range(5000)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else data[:8] + b"\0" * 200 + data[208:])
    with one_clear_line(path, "row 1", "Parquet"):
        list(fmt.reader(path))


def test_a_jsonl_trace_given_to_a_csv_reader_says_so(tmp_path: Path) -> None:
    """A Mooncake JSONL file passed as an Azure trace: the header error listed the JSON line split at its commas."""
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3]}\n')
    with one_clear_line(path, "line 1 (header)", "expected a CSV header with columns ['ContextTokens', "
                        "'GeneratedTokens', 'TIMESTAMP'], got a JSON line", "kind: mooncake"):
        list(AzureTrace(path))


def test_a_csv_trace_given_to_the_jsonl_reader_says_so(tmp_path: Path) -> None:
    path = tmp_path / "conv.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    with one_clear_line(path, "line 1, column '*': expected a JSON object", "looks like a CSV header",
                        "kind azure, burstgpt or csv"):
        list(MooncakeTrace(path))


@pytest.mark.parametrize("parquet", [False, True], ids=["csv", "parquet"])
def test_a_column_read_twice_in_the_header_is_named(tmp_path: Path, parquet: bool) -> None:
    """A header naming a column that is read twice was read silently from its first copy, whichever was meant."""
    if parquet:
        path = tmp_path / "trace.parquet"
        table = pa.Table.from_arrays([pa.array(v) for v in (["0", "1"], ["10", "20"], ["5", "6"], ["7", "8"])],
                                     names=["t", "p", "o", "p"])
        pq.write_table(table, path)
        where = "Parquet schema"
    else:
        path = tmp_path / "trace.csv"
        path.write_text("t,p,o,p\n0,10,5,7\n1,20,6,8\n")
        where = "line 1 (header)"
    with one_clear_line(path, where, "column 'p' appears 2 times (columns 2 and 4)"):
        list(CsvTrace(path, "t", "p", "o"))
    path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,TIMESTAMP\n2023-11-16 18:15:46.5,10,5,x\n")
    with one_clear_line(path, "line 1 (header)", "column 'TIMESTAMP' appears 2 times (columns 1 and 4)"):
        list(AzureTrace(path))
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,Other,Other\n2023-11-16 18:15:46.5,10,5,x,y\n")
    assert len(list(AzureTrace(path))) == 1  # a column that is not read may repeat


def test_an_empirical_length_column_named_twice_is_named(tmp_path: Path) -> None:
    """The length table read the first of two same-named columns silently."""
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens,num_prefill_tokens\n5,6,7\n")
    with one_clear_line(path, "line 1 (header)", "column 'num_prefill_tokens' appears 2 times (columns 1 and 3)"):
        Empirical(path)


@pytest.mark.parametrize(("columns", "key", "other", "col"),
                         [({"arrival": "t", "prompt": "p", "output": "p"}, "output", "prompt", "p"),
                          ({"arrival": "t", "prompt": "t", "output": "o"}, "prompt", "arrival", "t"),
                          ({"arrival": "o", "prompt": "p", "output": "o"}, "output", "arrival", "o")],
                         ids=["prompt_is_output", "arrival_is_prompt", "arrival_is_output"])
def test_one_column_for_two_csv_keys_is_refused(tmp_path: Path, columns: dict[str, str], key: str, other: str,
                                                 col: str) -> None:
    """kind: csv read one column as both the prompt and the output length (every request then had output = prompt)."""
    path = tmp_path / "trace.csv"
    path.write_text("t,p,o\n0,10,5\n1,20,6\n")
    message = (f"columns.{key}: expected a column other than columns.{other}'s, got the same column {col!r} (one "
               f"column cannot hold both)")
    with pytest.raises(ConfigError) as e:
        build_workload({"kind": "csv", "path": str(path), "columns": columns}, seed=0)
    assert str(e.value) == f"workload.{message}"
    with pytest.raises(ConfigError) as e:
        CsvTrace(path, columns["arrival"], columns["prompt"], columns["output"])
    assert str(e.value) == message


def test_one_column_for_both_empirical_lengths_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n")
    lengths = {"dist": "empirical", "path": str(path), "prompt_column": "num_prefill_tokens",
               "output_column": "num_prefill_tokens"}
    with pytest.raises(ConfigError, match=r"^workload\.lengths\.output_column: expected a column other than the "
                                          r"prompt_column's, got the same column 'num_prefill_tokens'"):
        build_workload({"kind": "synthetic", "arrival": {"process": "poisson", "rate": 1.0}, "num_requests": 2,
                        "lengths": lengths}, seed=0)
    with pytest.raises(ConfigError, match=r"^empirical lengths: expected an 'output_column' other than the "
                                          r"'prompt_column', got the same column 'num_prefill_tokens'"):
        Empirical(path, "num_prefill_tokens", "num_prefill_tokens")
