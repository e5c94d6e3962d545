"""The BurstGPT reader on generated files in the release layouts (``_1``/``_2`` and ``_3`` column orders, plain and
gzip): filters, windows, rate scaling, the hour-of-day clock and the failed-request counts.

The real CSVs are GitHub release assets that are not available here; :func:`burstgpt_rows` draws a small table
with the real columns and value kinds (integer-second timestamps with ties, both models and log types, failed rows
with 0 response tokens), so every expected count below is computed from the same table.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from llmsim.errors import ConfigError, TraceError
from llmsim.workload import BurstGPTTrace, build_workload
from tests.workload.helpers import COLUMNS_12, burstgpt_rows, write_burstgpt


def key(wl) -> list[tuple]:
    return [(r.id, r.arrival, r.prompt_tokens, r.output_tokens, r.extra["model"], r.extra["log_type"]) for r in wl]


def expected(rows: pd.DataFrame, origin: float | None = None) -> list[tuple]:
    base = rows["Timestamp"].iloc[0] if origin is None else origin
    ok = rows[rows["Response tokens"] > 0]
    return [(i, float(t - base), int(p), int(o), m, lt) for i, (t, p, o, m, lt) in enumerate(
        zip(ok["Timestamp"], ok["Request tokens"], ok["Response tokens"], ok["Model"], ok["Log Type"]))]


@pytest.mark.parametrize("layout", ["1", "3"])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_both_layouts_plain_and_gzip_give_the_rows_minus_failures(tmp_path: Path, layout: str, gz: bool) -> None:
    rows = burstgpt_rows()
    path = write_burstgpt(tmp_path / f"BurstGPT_{layout}.csv{'.gz' if gz else ''}", rows, layout, gz)
    wl = BurstGPTTrace(path, chunk_rows=64)  # several chunks
    assert key(wl) == expected(rows)
    fails = int((rows["Response tokens"] == 0).sum())
    assert fails > 10
    assert wl.stats.skipped == {"zero_output_tokens": fails}
    assert wl.stats.rows_read == len(rows) == wl.stats.yielded + fails


def test_v3_layout_keeps_session_and_elapsed_time(tmp_path: Path) -> None:
    rows = burstgpt_rows()
    reqs = list(BurstGPTTrace(write_burstgpt(tmp_path / "BurstGPT_3.csv", rows, "3")))
    ok = rows[rows["Response tokens"] > 0]
    assert [r.extra["session_id"] for r in reqs] == list(ok["Session ID"].fillna(""))
    assert [r.extra["elapsed_time"] for r in reqs] == [str(v) for v in ok["Elapsed time"]]
    plain = list(BurstGPTTrace(write_burstgpt(tmp_path / "BurstGPT_1.csv", rows, "1")))
    assert set(plain[0].extra) == {"model", "log_type"}


@pytest.mark.parametrize("model,log_type", [("GPT-4", None), (["ChatGPT", "GPT-4"], None),
                                            (None, "Conversation log"), ("ChatGPT", ["API log"])])
def test_filters_keep_matching_rows_and_count_the_rest(tmp_path: Path, model, log_type) -> None:
    rows = burstgpt_rows()
    path = write_burstgpt(tmp_path / "b.csv.gz", rows, "3", gz=True)
    wl = build_workload({"kind": "burstgpt", "path": str(path), "model": model, "log_type": log_type}, seed=0)
    models = [model] if isinstance(model, str) else model
    types = [log_type] if isinstance(log_type, str) else log_type
    m_ok = rows["Model"].isin(models) if models else pd.Series(True, index=rows.index)
    t_ok = rows["Log Type"].isin(types) if types else pd.Series(True, index=rows.index)
    kept = rows[m_ok & t_ok]
    exp = [e for e in expected(kept, origin=rows["Timestamp"].iloc[0])]  # the clock starts at the file's first row
    assert key(wl) == [(i, *e[1:]) for i, e in enumerate(exp)]
    skipped = {"model_filter": int((~m_ok).sum()), "log_type_filter": int((m_ok & ~t_ok).sum()),
               "zero_output_tokens": int((kept["Response tokens"] == 0).sum())}
    assert wl.stats.skipped == {k: v for k, v in skipped.items() if v}
    assert wl.stats.rows_read == wl.stats.yielded + wl.stats.total_skipped == len(rows)


def test_window_and_rate_scale_like_the_azure_preset(tmp_path: Path) -> None:
    rows = burstgpt_rows()
    path = str(write_burstgpt(tmp_path / "BurstGPT_1.csv", rows))
    full = expected(rows)
    inside = [e for e in full if 100 <= e[1] < 400]
    wl = build_workload({"kind": "burstgpt", "path": path, "window": [100, 400]}, seed=0)
    got = key(wl)
    assert [(r[1], r[2], r[3]) for r in got] == [(e[1] - 100, e[2], e[3]) for e in inside]
    assert [r[0] for r in got] == list(range(len(inside)))
    assert wl.stats.stopped == "window_end"
    assert wl.stats.skipped["outside_window"] == sum(e[1] < 100 for e in full) + 1  # + the row that ended it
    scaled = build_workload({"kind": "burstgpt", "path": path, "window": [100, 400], "rate_scale": 4.0,
                             "max_requests": 20}, seed=0)
    assert [r.arrival for r in scaled] == [(e[1] - 100) / 4.0 for e in inside[:20]]
    assert scaled.stats.stopped == "max_requests"


def test_midnight_clock_keeps_timestamps_for_hour_of_day_windows(tmp_path: Path) -> None:
    rows = burstgpt_rows(start=36000 - 50)  # the file starts at 9:59:10 on day 1
    path = str(write_burstgpt(tmp_path / "BurstGPT_2.csv", rows))
    wl = build_workload({"kind": "burstgpt", "path": path, "time_origin": "midnight"}, seed=0)
    assert key(wl) == expected(rows, origin=0)
    ten_to_eleven = build_workload({"kind": "burstgpt", "path": path, "time_origin": "midnight",
                                    "window": [36000, 39600]}, seed=0)
    arrivals = [r.arrival for r in ten_to_eleven]
    assert arrivals == [e[1] - 36000 for e in expected(rows, origin=0) if 36000 <= e[1] < 39600]


@pytest.mark.parametrize("time_origin", ["first_row", "midnight"])
@pytest.mark.parametrize("value", ["-3", "-0.5", "nan", "-inf", "inf"])
def test_negative_or_non_finite_timestamp_is_a_bad_row_on_either_clock(tmp_path: Path, time_origin: str,
                                                                       value: str) -> None:
    """A negative first Timestamp was read as the trace start under first_row (the next row then arrived at 7 s)."""
    bad = tmp_path / "neg.csv"
    bad.write_text(",".join(COLUMNS_12) + f"\n{value},ChatGPT,5,5,10,API log\n4,ChatGPT,6,5,11,API log\n"
                   "6,ChatGPT,7,5,12,API log\n")
    with pytest.raises(TraceError, match=rf"^.*neg\.csv: line 2, column 'Timestamp': expected a finite number of "
                                         rf"seconds >= 0 \(BurstGPT's Timestamp is never negative\), got '{value}'$"):
        list(BurstGPTTrace(bad, time_origin=time_origin))
    wl = BurstGPTTrace(bad, time_origin=time_origin, on_error="skip")
    start = 4.0 if time_origin == "first_row" else 0.0
    assert [(r.arrival, r.prompt_tokens) for r in wl] == [(4.0 - start, 6), (6.0 - start, 7)]
    assert wl.stats.skipped == {"malformed": 1} and "line 2" in wl.stats.errors[0]


def test_timestamps_going_back_are_refused_never_sorted(tmp_path: Path) -> None:
    """Replay needs non-decreasing arrivals: ties are kept, an earlier row is an error or skipped as out_of_order."""
    path = tmp_path / "back.csv"
    path.write_text(",".join(COLUMNS_12) + "\n5,ChatGPT,5,5,10,API log\n5,ChatGPT,6,5,11,API log\n"
                    "3,ChatGPT,7,5,12,API log\n8,ChatGPT,8,5,13,API log\n")
    with pytest.raises(TraceError, match=r"back\.csv: line 4, column 'Timestamp': expected a time >= the previous "
                                         r"row's \(0\.000000 s after trace start\), got '3'$"):
        list(BurstGPTTrace(path))
    wl = BurstGPTTrace(path, on_error="skip")
    assert [(r.arrival, r.prompt_tokens) for r in wl] == [(0.0, 5), (0.0, 6), (3.0, 8)]
    assert wl.stats.skipped == {"out_of_order": 1}


def test_failed_requests_only_file_and_filter_typo_are_one_line_errors(tmp_path: Path) -> None:
    fails = tmp_path / "fails.csv"
    fails.write_text(",".join(COLUMNS_12) + "\n5,ChatGPT,10,0,10,API log\n6,GPT-4,10,0,10,API log\n")
    with pytest.raises(TraceError, match=r"all 2 data rows were skipped \(2 zero_output_tokens\)$"):
        list(BurstGPTTrace(fails))
    path = write_burstgpt(tmp_path / "b.csv")
    with pytest.raises(TraceError) as e:
        list(BurstGPTTrace(path, model="gpt-4"))
    msg = str(e.value)
    assert "\n" not in msg and "model_filter" in msg and "column 'Model' holds ['ChatGPT', 'GPT-4']" in msg


def test_config_errors_say_where_to_get_the_file(tmp_path: Path) -> None:
    for cfg in ({"kind": "burstgpt"}, {"kind": "burstgpt", "path": None}, {"kind": "burstgpt", "path": ""}):
        with pytest.raises(ConfigError, match=r"^workload\.path: missing; download a BurstGPT CSV .*"
                                              r"https://github\.com/HPMLL/BurstGPT/releases and pass "
                                              r"workload\.path=/path/to/BurstGPT_1\.csv$"):
            build_workload(cfg, seed=0)
    with pytest.raises(TraceError, match=r"nope\.csv: trace file not found; download .*HPMLL/BurstGPT/releases"):
        list(build_workload({"kind": "burstgpt", "path": str(tmp_path / "nope.csv")}, seed=0))
    with pytest.raises(ConfigError, match=r"workload\.time_origin: expected one of first_row, midnight"):
        build_workload({"kind": "burstgpt", "path": "x.csv", "time_origin": "noon"}, seed=0)
    with pytest.raises(ConfigError, match=r"workload\.model"):
        build_workload({"kind": "burstgpt", "path": "x.csv", "model": []}, seed=0)
