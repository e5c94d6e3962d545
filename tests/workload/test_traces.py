"""Trace readers on fixtures in the exact upstream formats, compressed and Parquet copies, and the real files.

The bad-input corpus (one test per class of bad input and reader format) is tests/workload/test_bad_inputs.py.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmsim.errors import ConfigError, TraceError
from llmsim.workload import AzureTrace, BurstGPTTrace, CsvTrace, Limited, MooncakeTrace, build_workload

BURST_12 = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,230,1317,Conversation log\n"
    "118,GPT-4,417,276,693,Conversation log\n"
    "130,ChatGPT,300,0,300,API log\n"
    "131,GPT-4,20,7,27,API log\n"
)
BURST_3 = (
    "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,s1,3.5,ChatGPT,472,18,490,Conversation log\n"
    "45,s1,9.25,ChatGPT,1087,230,1317,Conversation log\n"
    "118,,4.0,GPT-4,417,276,693,Conversation log\n"
    "130,,1.0,ChatGPT,300,0,300,API log\n"
    "131,,2.0,GPT-4,20,7,27,API log\n"
)
AZURE_2023 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:50.9951690,879,31\n"
    "2023-11-16 18:16:01.1000000,1000,1\n"
)
AZURE_2024 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2024-05-10 00:00:00.009930+00:00,4808,10\n"
    "2024-05-10 00:00:01+00:00,3180,8\n"
    "2024-05-10 00:00:01.500000+00:00,110,27\n"
    "2024-05-12 00:00:00+00:00,57,2\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# -- BurstGPT ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [BURST_12, BURST_3], ids=["v1_2_columns", "v3_columns"])
def test_burstgpt_both_column_orders(tmp_path: Path, text: str) -> None:
    wl = BurstGPTTrace(write(tmp_path, "BurstGPT_1.csv", text))
    reqs = list(wl)
    assert [r.id for r in reqs] == [0, 1, 2, 3]
    assert [r.arrival for r in reqs] == [0.0, 40.0, 113.0, 126.0]
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(472, 18), (1087, 230), (417, 276), (20, 7)]
    assert reqs[2].extra["model"] == "GPT-4"
    assert reqs[0].extra["log_type"] == "Conversation log"
    assert wl.stats.skipped == {"zero_output_tokens": 1}  # BurstGPT's failed requests
    assert wl.stats.rows_read == 5 and wl.stats.yielded == 4


def test_burstgpt_v3_keeps_session_and_elapsed(tmp_path: Path) -> None:
    reqs = list(BurstGPTTrace(write(tmp_path, "BurstGPT_3.csv", BURST_3)))
    assert reqs[1].extra == {
        "model": "ChatGPT",
        "log_type": "Conversation log",
        "session_id": "s1",
        "elapsed_time": "9.25",
    }


def test_burstgpt_model_and_log_type_filters(tmp_path: Path) -> None:
    path = write(tmp_path, "b.csv", BURST_12)
    wl = BurstGPTTrace(path, model="GPT-4")
    reqs = list(wl)
    # the clock still starts at the file's first row, not the first GPT-4 row
    assert [r.arrival for r in reqs] == [113.0, 126.0]
    assert wl.stats.skipped == {"model_filter": 3}
    wl = BurstGPTTrace(path, model="ChatGPT", log_type="Conversation log")
    assert len(list(wl)) == 2
    assert wl.stats.skipped == {"model_filter": 2, "log_type_filter": 1}
    assert wl.stats.rows_read == wl.stats.yielded + wl.stats.total_skipped


def test_burstgpt_missing_column_in_header(tmp_path: Path) -> None:
    path = write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Total tokens,Log Type\n5,ChatGPT,1,2,x\n")
    with pytest.raises(TraceError, match=r"b\.csv: line 1 .*'Response tokens'"):
        list(BurstGPTTrace(path))


# -- Azure -------------------------------------------------------------------------------------


def test_azure_2023_seven_fractional_digits(tmp_path: Path) -> None:
    reqs = list(AzureTrace(write(tmp_path, "AzureLLMInferenceTrace_conv.csv", AZURE_2023)))
    assert [r.id for r in reqs] == [0, 1, 2, 3]
    assert reqs[0].arrival == 0.0
    assert reqs[1].arrival == pytest.approx(4.314579)
    assert reqs[2].arrival == reqs[1].arrival  # equal timestamps are in order
    assert reqs[3].arrival == pytest.approx(14.41941)
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs][:2] == [(374, 44), (396, 109)]


def test_azure_2024_mixed_timestamps(tmp_path: Path) -> None:
    reqs = list(AzureTrace(write(tmp_path, "AzureLLMInferenceTrace_code_1week.csv", AZURE_2024)))
    assert [r.arrival for r in reqs] == pytest.approx([0.0, 0.99007, 1.49007, 172799.99007])
    assert reqs[3].prompt_tokens == 57


def test_azure_chunk_boundaries_do_not_matter(tmp_path: Path) -> None:
    path = write(tmp_path, "a.csv", AZURE_2023)
    whole = [(r.id, r.arrival, r.prompt_tokens) for r in AzureTrace(path)]
    chunked = [(r.id, r.arrival, r.prompt_tokens) for r in AzureTrace(path, chunk_rows=1)]
    assert whole == chunked


@pytest.mark.parametrize(
    ("row", "line", "column", "expected"),
    [
        ("2023-11-16 18:15:51.0,abc,3", 4, "ContextTokens", "integer token count in [0, 100000000]"),
        ("2023-11-16 18:15:51.0,10,-3", 4, "GeneratedTokens", "integer token count in [0, 100000000]"),
        ("2023-11-16 18:15:51.0,10.5,3", 4, "ContextTokens", "integer token count in [0, 100000000]"),
        ("not a time,10,3", 4, "TIMESTAMP", "ISO-8601"),
        ("2023-11-16 18:15:51.0,10", 4, "*", "3 fields"),
        ("2023-11-16 18:15:40.0,10,3", 4, "TIMESTAMP", "previous row"),
    ],
    ids=["non_numeric", "negative", "fractional", "bad_time", "missing_column", "out_of_order"],
)
def test_azure_malformed_rows_name_file_line_column(
    tmp_path: Path, row: str, line: int, column: str, expected: str
) -> None:
    text = AZURE_2023.splitlines()[:3] + [row] + AZURE_2023.splitlines()[4:]
    path = write(tmp_path, "bad.csv", "\n".join(text) + "\n")
    with pytest.raises(TraceError) as exc:
        list(AzureTrace(path))
    msg = str(exc.value)
    assert str(path) in msg and f"line {line}" in msg and repr(column) in msg and expected in msg


def test_on_error_skip_counts_malformed_rows(tmp_path: Path) -> None:
    text = AZURE_2023.splitlines()
    text.insert(2, "2023-11-16 18:15:47.0,oops,3")
    text.insert(3, "2023-11-16 18:15:40.0,10,3")  # earlier than the previous kept row
    wl = AzureTrace(write(tmp_path, "a.csv", "\n".join(text) + "\n"), on_error="skip")
    reqs = list(wl)
    assert len(reqs) == 4 and [r.id for r in reqs] == [0, 1, 2, 3]
    assert wl.stats.skipped == {"malformed": 1, "out_of_order": 1}
    assert "line 3" in wl.stats.errors[0] and "line 4" in wl.stats.errors[1]
    assert wl.stats.rows_read == 6


def test_missing_file_and_bad_on_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not found"):
        list(AzureTrace(tmp_path / "nope.csv"))
    with pytest.raises(ConfigError, match="on_error"):
        AzureTrace(tmp_path / "a.csv", on_error="ignore")


# -- Mooncake ----------------------------------------------------------------------------------

MOONCAKE_ROWS = [
    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": list(range(14))},
    {"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [0, *range(14, 28)]},
    {"timestamp": 0, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]},
    {"timestamp": 3000, "input_length": 800, "output_length": 3, "hash_ids": [46, 47]},
    {"timestamp": 6001, "input_length": 100, "output_length": 9, "hash_ids": [48]},
]


def write_jsonl(tmp_path: Path, rows: list, name: str = "conversation_trace.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_mooncake_reads_ms_and_keeps_hash_ids(tmp_path: Path) -> None:
    reqs = list(MooncakeTrace(write_jsonl(tmp_path, MOONCAKE_ROWS)))
    assert [r.arrival for r in reqs] == [0.0, 0.0, 0.0, 3.0, 6.001]
    assert reqs[2].hash_ids == (0, 42, 43, 44, 45)
    assert isinstance(reqs[0].hash_ids, tuple)
    assert (reqs[1].prompt_tokens, reqs[1].output_tokens) == (7322, 490)


def test_mooncake_jitter_spreads_buckets_deterministically(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, MOONCAKE_ROWS)
    a = [r.arrival for r in MooncakeTrace(path, jitter_s=3.0, seed=1)]
    b = [r.arrival for r in MooncakeTrace(path, jitter_s=3.0, seed=1)]
    c = [r.arrival for r in MooncakeTrace(path, jitter_s=3.0, seed=2)]
    assert a == b and a != c
    assert a == sorted(a)
    assert all(0.0 <= t < 3.0 for t in a[:3]) and len(set(a[:3])) == 3
    assert 3.0 <= a[3] < 6.001 and a[4] >= 6.001
    reqs = list(MooncakeTrace(path, jitter_s=3, seed=1))
    assert [r.id for r in reqs] == list(range(5))
    assert reqs[2].hash_ids is not None  # hash ids follow their request through the shuffle
    assert {r.prompt_tokens for r in reqs[:3]} == {6758, 7322, 2290}


@pytest.mark.parametrize(
    ("bad", "column"),
    [
        ({"timestamp": 3500, "input_length": "12", "output_length": 3}, "input_length"),
        ({"timestamp": 3500, "input_length": 12, "output_length": -1}, "output_length"),
        ({"timestamp": 3500, "output_length": 3}, "input_length"),
        ({"timestamp": 3500, "input_length": 12, "output_length": 3, "hash_ids": "x"}, "hash_ids"),
        ({"timestamp": 1, "input_length": 12, "output_length": 3}, "timestamp"),
    ],
    ids=["string", "negative", "missing", "bad_hash_ids", "out_of_order"],
)
def test_mooncake_malformed(tmp_path: Path, bad: dict, column: str) -> None:
    rows = [MOONCAKE_ROWS[3], bad, MOONCAKE_ROWS[4]]
    path = write_jsonl(tmp_path, rows)
    with pytest.raises(TraceError) as exc:
        list(MooncakeTrace(path))
    msg = str(exc.value)
    assert str(path) in msg and "line 2" in msg and repr(column) in msg
    wl = MooncakeTrace(path, on_error="skip")
    assert len(list(wl)) == 2 and wl.stats.total_skipped == 1


def test_mooncake_row_without_the_ids_of_the_rows_before_is_malformed(tmp_path: Path) -> None:
    """A row lacking ``hash_ids`` in a trace whose rows carry them silently shared nothing with the prefix cache; a
    trace with no ids at all still reads (every request shares nothing)."""
    rows = [MOONCAKE_ROWS[3], {"timestamp": 3500, "input_length": 12, "output_length": 3}, MOONCAKE_ROWS[4]]
    path = write_jsonl(tmp_path, rows)
    with pytest.raises(TraceError, match=r"line 2, column 'hash_ids': expected the prefix-block ids every earlier "
                                         r"row has \(line 1 has them\), got no such key$"):
        list(MooncakeTrace(path))
    wl = MooncakeTrace(path, on_error="skip")
    assert len(list(wl)) == 2 and wl.stats.skipped == {"malformed": 1}
    bare = write_jsonl(tmp_path, [{k: v for k, v in r.items() if k != "hash_ids"} for r in rows], "bare.jsonl")
    assert [r.hash_ids for r in MooncakeTrace(bare)] == [None, None, None]

def test_mooncake_invalid_json_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, [MOONCAKE_ROWS[0], '{"timestamp": 1, "input_'])
    with pytest.raises(TraceError, match=r"line 2, column '\*': expected a JSON object, got invalid JSON"):
        list(MooncakeTrace(path))


def test_mooncake_line_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    """json keeps a repeated key's last value: a line that says two things is refused, never read half."""
    dup = '{"timestamp": 3500, "input_length": 12, "output_length": 3, "input_length": 900}'
    path = write_jsonl(tmp_path, [MOONCAKE_ROWS[3], dup, MOONCAKE_ROWS[4]])
    with pytest.raises(TraceError) as exc:
        list(MooncakeTrace(path))
    msg = str(exc.value)
    assert msg.startswith(f"{path}: line 2, column 'input_length': expected each key once") and "\n" not in msg
    wl = MooncakeTrace(path, on_error="skip")
    assert len(list(wl)) == 2 and wl.stats.skipped == {"malformed": 1}


@pytest.mark.parametrize("jitter", [True, False, -1.0, float("nan"), float("inf"), "3"])
def test_mooncake_jitter_must_be_a_number_of_seconds(tmp_path: Path, jitter: object) -> None:
    with pytest.raises(ConfigError, match=r"^jitter_s: expected .*>= 0"):
        MooncakeTrace(write_jsonl(tmp_path, MOONCAKE_ROWS), jitter_s=jitter)


# -- generic CSV -------------------------------------------------------------------------------

VIDUR = (
    "arrived_at,num_prefill_tokens,num_decode_tokens,user,cls\n"
    "0.0,10,5,alice,gold\n"
    "0.25,20,6,bob,silver\n"
    "1.5,30,0,alice,gold\n"
)


def test_generic_csv_with_column_map(tmp_path: Path) -> None:
    wl = build_workload(
        {
            "kind": "csv",
            "path": str(write(tmp_path, "splitwise_conv.csv", VIDUR)),
            "columns": {
                "arrival": "arrived_at",
                "prompt": "num_prefill_tokens",
                "output": "num_decode_tokens",
                "tenant": "user",
                "slo_class": "cls",
            },
            "extra": {"user_name": "user"},
        },
        seed=0,
    )
    reqs = list(wl)
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in reqs] == [(0.0, 10, 5), (0.25, 20, 6)]
    assert wl.stats.skipped == {"zero_output_tokens": 1}  # the third row asks for 0 tokens: never simulated
    assert [r.tenant for r in reqs] == ["alice", "bob"]
    assert reqs[1].slo_class == "silver" and reqs[1].extra == {"user_name": "bob"}


def test_generic_csv_ms_units_and_zero_output_skip(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "t_ms;in;out\n1000;1;2\n1500;3;0\n4000;5;6\n")
    wl = build_workload(
        {
            "kind": "csv",
            "path": str(path),
            "delimiter": ";",
            "arrival_unit": "ms",
            "columns": {"arrival": "t_ms", "prompt": "in", "output": "out"},
        },
        seed=0,
    )
    assert [r.arrival for r in wl] == [0.0, 3.0]
    assert wl.stats.skipped == {"zero_output_tokens": 1}


def test_generic_csv_datetime_and_blank_line(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "when,p,o\n2024-01-01T00:00:00Z,1,2\n\n2024-01-01T00:01:00Z,3,4\n")
    wl = CsvTrace(path, "when", "p", "o", arrival_unit="datetime")
    assert [r.arrival for r in wl] == [0.0, 60.0]
    assert wl.stats.skipped == {"blank_line": 1}


def test_generic_csv_bad_value_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "a,p,o\n0,1,2\n1,2,3\n2,x,4\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 4, column 'p': expected an integer token count"):
        list(CsvTrace(path, "a", "p", "o"))


def test_generic_csv_unknown_column_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'arival'.*allowed keys"):
        build_workload(
            {"kind": "csv", "path": "x.csv", "columns": {"arival": "a", "prompt": "p", "output": "o"}}, 0
        )


# -- the real files in shared/traces -------------------------------------------------------------


def _real(shared_dir: Path, rel: str) -> Path:
    path = shared_dir / "traces" / rel
    if not path.exists():
        pytest.skip(f"real trace {path} is not present in ../shared")
    return path


def test_real_azure_conv(shared_dir: Path) -> None:
    wl = AzureTrace(_real(shared_dir, "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    n = prompt = output = 0
    last = 0.0
    for r in wl:
        assert r.arrival >= last
        last = r.arrival
        n += 1
        prompt += r.prompt_tokens
        output += r.output_tokens
    assert n == 19_366
    assert prompt / n == pytest.approx(1154.7, abs=0.05)
    assert output / n == pytest.approx(211.1, abs=0.05)
    assert last == pytest.approx(3501.7, abs=0.1)
    assert wl.stats.skipped == {}


def test_real_azure_code_window_and_scale(shared_dir: Path) -> None:
    path = _real(shared_dir, "azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    wl = build_workload({"kind": "azure", "path": str(path), "window": [600, 1200], "rate_scale": 2.0}, 0)
    reqs = list(wl)
    assert reqs and all(0 <= r.arrival < 300 for r in reqs)
    assert wl.stats.stopped == "window_end"
    assert wl.stats.skipped["outside_window"] >= 1


def test_real_mooncake_conversation(shared_dir: Path) -> None:
    reqs = list(MooncakeTrace(_real(shared_dir, "mooncake/conversation_trace.jsonl")))
    assert len(reqs) == 12_031
    assert all(r.hash_ids is not None and len(r.hash_ids) * 512 >= r.prompt_tokens for r in reqs)
    assert sum(r.prompt_tokens for r in reqs) / len(reqs) == pytest.approx(12035.1, abs=0.1)


@pytest.mark.parametrize("kind,rel,rows", [
    ("azure", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", 19_366),
    ("azure", "azure_llm_2023/AzureLLMInferenceTrace_code.csv", 8_819),
    ("mooncake", "mooncake/conversation_trace.jsonl", 12_031),
    ("mooncake", "mooncake/synthetic_trace.jsonl", 3_993),
])
def test_real_twenty_minute_windows_partition_the_trace(shared_dir: Path, kind: str, rel: str, rows: int) -> None:
    """Every row is read once: 20-minute windows of a real trace hold all its rows between them, each starts at its
    own 0 (ids from 0), and rate_scale 2 halves every arrival (so the window's rate doubles)."""
    path = str(_real(shared_dir, rel))
    whole = [r.arrival for r in build_workload({"kind": kind, "path": path}, 0)]
    assert len(whole) == rows and whole[0] == 0.0 and all(b >= a for a, b in zip(whole, whole[1:]))
    total = 0
    for start in range(0, int(whole[-1]) + 1, 1200):  # the synthetic Mooncake trace spans 1,022 s: one window
        cut = build_workload({"kind": kind, "path": path, "window": [start, start + 1200]}, 0)
        reqs = list(cut)
        expected = [t - start for t in whole if start <= t < start + 1200]
        assert [r.arrival for r in reqs] == pytest.approx(expected, abs=1e-9)
        assert [r.id for r in reqs] == list(range(len(reqs)))
        fast = build_workload({"kind": kind, "path": path, "window": [start, start + 1200], "rate_scale": 2.0}, 0)
        assert [r.arrival for r in fast] == pytest.approx([t / 2 for t in expected], abs=1e-9)
        total += len(reqs)
    assert total == rows


def test_real_mooncake_jitter_spreads_the_buckets(shared_dir: Path) -> None:
    """jitter_s 3 spreads the conversation trace's ~3 s buckets (~10 requests at one timestamp) within the bucket:
    the same requests, sorted, each within 3 s of its own timestamp and before the next bucket."""
    path = _real(shared_dir, "mooncake/conversation_trace.jsonl")
    plain, spread = list(MooncakeTrace(path)), list(MooncakeTrace(path, jitter_s=3.0, seed=1))
    assert [(r.id, r.prompt_tokens, r.hash_ids) for r in spread] == [(r.id, r.prompt_tokens, r.hash_ids)
                                                                      for r in plain]
    a = np.array([r.arrival for r in spread])
    t = np.array([r.arrival for r in plain])
    assert np.all(np.diff(a) >= 0) and np.all(a >= t) and np.all(a - t < 3.0)
    assert len(np.unique(t)) == 1_180 and len(np.unique(a)) > 12_000

def test_limit_stops_reading_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "a.csv", AZURE_2023)
    wl = Limited(AzureTrace(path, chunk_rows=2), 1)
    assert [r.id for r in wl] == [0]
    assert wl.stats.rows_read == 2 and wl.stats.stopped == "max_requests"
    assert wl.describe() == {
        "kind": "limit",
        "max_requests": 1,
        "source": {"kind": "azure", "path": str(path), "on_error": "raise"},
    }


# -- compressed and Parquet copies read exactly like the plain file ------------------------------

COMPRESSORS = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}


def key(wl) -> list[tuple]:
    return [(r.id, r.arrival, r.prompt_tokens, r.output_tokens, r.hash_ids, r.extra) for r in wl]


@pytest.mark.parametrize("suffix", ["gz", "xz", "bz2"])
@pytest.mark.parametrize("named", [True, False], ids=["with_suffix", "magic_bytes_only"])
def test_compressed_csv_round_trip(tmp_path: Path, suffix: str, named: bool) -> None:
    plain = write(tmp_path, "azure.csv", AZURE_2023)
    packed = tmp_path / (f"azure.csv.{suffix}" if named else f"azure_{suffix}.csv")
    packed.write_bytes(COMPRESSORS[suffix](plain.read_bytes()))
    expected = key(AzureTrace(plain))
    assert len(expected) == 4
    assert key(AzureTrace(packed)) == expected
    assert key(AzureTrace(packed, chunk_rows=1)) == expected
    burst_plain = write(tmp_path, "b.csv", BURST_3)
    burst = tmp_path / f"b.csv.{suffix}"
    burst.write_bytes(COMPRESSORS[suffix](burst_plain.read_bytes()))
    assert key(BurstGPTTrace(burst)) == key(BurstGPTTrace(burst_plain))


@pytest.mark.parametrize("suffix", ["gz", "xz", "bz2"])
def test_compressed_jsonl_round_trip(tmp_path: Path, suffix: str) -> None:
    plain = write_jsonl(tmp_path, MOONCAKE_ROWS)
    packed = tmp_path / f"conversation_trace.jsonl.{suffix}"
    packed.write_bytes(COMPRESSORS[suffix](plain.read_bytes()))
    assert key(MooncakeTrace(packed, jitter_s=2.0, seed=3)) == key(MooncakeTrace(plain, jitter_s=2.0, seed=3))
    assert len(list(MooncakeTrace(packed))) == 5


def test_parquet_round_trip_typed_and_text_columns(tmp_path: Path) -> None:
    plain = write(tmp_path, "azure.csv", AZURE_2023)
    df = pd.read_csv(plain, dtype=str)
    df.to_parquet(tmp_path / "text.parquet")  # every column a string, as in the CSV
    typed = df.assign(TIMESTAMP=pd.to_datetime(df["TIMESTAMP"]), ContextTokens=df["ContextTokens"].astype(int),
                      GeneratedTokens=df["GeneratedTokens"].astype("int32"))
    typed.to_parquet(tmp_path / "typed.parquet")  # a timestamp column and integer token columns
    typed.to_parquet(tmp_path / "typed_no_suffix.bin")  # found by its magic bytes
    expected = [(r.id, r.arrival, r.prompt_tokens, r.output_tokens) for r in AzureTrace(plain)]
    for name in ("text.parquet", "typed.parquet", "typed_no_suffix.bin"):
        for chunk in (1, 8192):
            got = [(r.id, r.arrival, r.prompt_tokens, r.output_tokens)
                   for r in AzureTrace(tmp_path / name, chunk_rows=chunk)]
            assert got == expected, (name, chunk)


def test_parquet_burstgpt_with_filters_and_extra(tmp_path: Path) -> None:
    plain = write(tmp_path, "b.csv", BURST_3)
    df = pd.read_csv(plain, keep_default_na=False)  # Timestamp / token columns typed int64
    df.to_parquet(tmp_path / "b.parquet")
    a, b = BurstGPTTrace(plain, model="ChatGPT"), BurstGPTTrace(tmp_path / "b.parquet", model="ChatGPT")
    assert key(b) == key(a) and len(key(a)) == 2
    assert b.stats.skipped == a.stats.skipped == {"model_filter": 2, "zero_output_tokens": 1}


def test_parquet_bad_value_names_row_and_column(tmp_path: Path) -> None:
    pd.DataFrame({"t": [0.0, 1.0, 2.0], "p": [1.0, float("nan"), 3.0], "o": [1, 2, 3]}).to_parquet(tmp_path / "x.pq")
    with pytest.raises(TraceError, match=r"x\.pq: row 2, column 'p': expected an integer token count"):
        list(CsvTrace(tmp_path / "x.pq", "t", "p", "o"))
    pd.DataFrame({"t": [0.0, 1.0], "p": [1, None], "o": [1, 2]}).to_parquet(tmp_path / "n.parquet")
    with pytest.raises(TraceError, match=r"n\.parquet: row 2, column 'p': .* got an empty value \(null\)"):
        list(CsvTrace(tmp_path / "n.parquet", "t", "p", "o"))



def test_parquet_timestamp_out_of_order_is_shown_as_a_time(tmp_path: Path) -> None:
    """A Parquet timestamp column's bad value is quoted as a time, not as nanoseconds since 1970."""
    times = pd.to_datetime(["2024-05-10 00:00:01", "2024-05-10 00:00:00.009930"], format="ISO8601", utc=True)
    pd.DataFrame({"TIMESTAMP": times, "ContextTokens": [10, 20], "GeneratedTokens": [1, 2]}).to_parquet(
        tmp_path / "u.parquet")
    with pytest.raises(TraceError) as e:
        list(AzureTrace(tmp_path / "u.parquet"))
    assert str(e.value).endswith("row 2, column 'TIMESTAMP': expected a time >= the previous row's (0.000000 s after "
                                 "trace start), got '2024-05-10T00:00:00.009930000'"), str(e.value)

# -- zero-length requests: skipped and counted by every reader -----------------------------------


def test_zero_length_rows_are_skipped_and_counted_in_every_reader(tmp_path: Path) -> None:
    azure = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,4\n"
                  "2023-11-16 18:15:47,5,0\n2023-11-16 18:15:48,5,6\n")
    moon = write_jsonl(tmp_path, [{"timestamp": 0, "input_length": 0, "output_length": 3},
                                  {"timestamp": 1, "input_length": 4, "output_length": 0},
                                  {"timestamp": 2, "input_length": 4, "output_length": 5}])
    generic = write(tmp_path, "g.csv", "t,p,o\n0,0,1\n1,1,0\n2,7,8\n")
    cases = [(AzureTrace(azure), (0, 2.0, 5, 6)), (MooncakeTrace(moon), (0, 0.002, 4, 5)),
             (CsvTrace(generic, "t", "p", "o"), (0, 2.0, 7, 8))]
    for wl, only in cases:
        assert [(r.id, r.arrival, r.prompt_tokens, r.output_tokens) for r in wl] == [only]
        assert wl.stats.skipped == {"zero_prompt_tokens": 1, "zero_output_tokens": 1}
        assert wl.stats.rows_read == 3


def test_a_file_of_only_skipped_rows_is_an_error_with_the_counts(tmp_path: Path) -> None:
    path = write(tmp_path, "fails.csv", BURST_12.splitlines()[0] + "\n5,ChatGPT,10,0,10,API log\n"
                 "6,GPT-4,10,0,10,API log\n")
    with pytest.raises(TraceError, match=r"fails\.csv: expected at least one usable request, got none: all 2 data "
                                         r"rows were skipped \(2 zero_output_tokens\)"):
        list(BurstGPTTrace(path))
    with pytest.raises(TraceError, match=r"all 5 data rows were skipped \(5 model_filter\)"):
        list(BurstGPTTrace(write(tmp_path, "b.csv", BURST_12), model="Claude"))
