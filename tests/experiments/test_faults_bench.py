"""``python -m experiments.bench faults``: how it classifies answers, and one small run with a backend killed
(the documented 2,000-request runs are commands, not tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

from experiments.bench.fault_load import StreamSeen, judge_stream, judge_whole  # noqa: E402
from tests.helpers import REPO  # noqa: E402


def seen(*lines: str) -> StreamSeen:
    s = StreamSeen()
    for line in lines:
        s.read(line, chat=False)
    return s


def tok(model: str = "m0", finish: str | None = None) -> str:
    return "data: " + json.dumps({"model": model, "choices": [{"text": " w", "finish_reason": finish}]})


def test_answers_are_classified_as_the_benchmark_documents() -> None:
    assert judge_stream(seen(tok(), tok(finish="length"), "data: [DONE]"), 2, 0.1).kind == "completed"
    cut = judge_stream(seen(tok(), 'data: {"error": {"message": "backend stalled"}}', "data: [DONE]"), 2, 0.1)
    assert cut.kind == "clean_error" and not cut.twice
    assert judge_stream(seen(tok()), 2, 0.1).kind == "unclean_error"  # cut without the error event
    twice = judge_stream(seen(tok("m0"), tok("m1", finish="length"), "data: [DONE]"), 2, 0.1)
    assert twice.twice  # output of two backends in one answer
    assert judge_whole(200, json.dumps({"model": "m0", "usage": {"completion_tokens": 3}}).encode(), 3, 0.1).kind \
        == "completed"
    assert judge_whole(503, b'{"error": {"message": "no healthy backend"}}', 3, 0.1).kind == "clean_error"
    assert judge_whole(500, b"Internal Server Error", 3, 0.1).kind == "unclean_error"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_small_run_with_a_killed_backend_ends_every_request_cleanly() -> None:
    p = subprocess.run([sys.executable, "-m", "experiments.bench", "faults", "--requests", "60", "--concurrency", "8",
                        "--backends", "2", "--kill", "b1", "--fault-at", "0.3", "--overhead-pairs", "5",
                        "--speedup", "20", "--json"], cwd=REPO, capture_output=True, text=True, timeout=220)
    assert p.returncode == 0, p.stderr[-2000:]
    row = json.loads(p.stdout.strip().splitlines()[-1])
    assert row["requests"] == 60 and row["completed"] + row["clean_errors"] == 60, row
    assert row["unclean_errors"] == row["hung"] == row["served_twice"] == 0, row
    assert row["router"]["ejections"] >= 1 and "overhead_p50_ms" in row and "fault_after_s" in row
    if sys.platform.startswith("linux"):  # the router's CPU is read from /proc
        assert row["router_cpu_ms_per_request"] > 0, row
