"""The replay reads a ``vllm bench serve --save-result --save-detailed`` result JSON as vLLM writes it."""

import json

import numpy as np
import pytest

from llmsim.errors import TraceError
from llmsim.profiles.cli import main
from llmsim.profiles.replay import read_requests, stats


def _result(**over):
    """Six requests, the third failed (vLLM saves 0 tokens and 0 s for it and its error text)."""
    r = {"date": "20250101-000000", "duration": 1.6, "completed": 5, "failed": 1,
         "input_lens": [100, 200, 150, 120, 90, 80], "output_lens": [20, 30, 0, 10, 1, 25],
         "ttfts": [0.05, 0.06, 0.0, 0.04, 0.03, 0.05], "latencies": [0.5, 0.7, 0.0, 0.3, 0.03, 0.6],
         "itls": [[0.45 / 19] * 19, [0.64 / 29] * 29, [], [0.26 / 9] * 9, [], [0.55 / 24] * 24],
         "start_times": [1000.0, 1000.2, 1000.3, 1000.5, 1000.9, 1001.0],
         "errors": ["", "", "timeout", "", "", ""]}
    r.update(over)
    return r


def _write(tmp_path, obj):
    p = tmp_path / "vllm-result.json"
    p.write_text(json.dumps(obj))
    return p


@pytest.mark.parametrize("drop", [None, "latencies"])
def test_successful_requests_replay_with_vllm_latencies(tmp_path, drop):
    obj = _result()
    if drop:
        del obj[drop]  # e2e is then ttft + sum(itls), the same number
    rec = read_requests(_write(tmp_path, obj))
    assert rec.failed == 1
    assert rec.arrival == pytest.approx([0.0, 0.2, 0.5, 0.9, 1.0])
    assert rec.prompt.tolist() == [100, 200, 120, 90, 80]
    assert rec.output.tolist() == [20, 30, 10, 1, 25]
    s = stats(rec.ttft, rec.e2e, rec.output)
    assert s["mean_ttft_ms"] == pytest.approx(46.0)
    # TPOT over the requests with more than one token: (e2el - ttft) / (output - 1)
    assert s["mean_tpot_ms"] == pytest.approx(np.mean([450 / 19, 640 / 29, 260 / 9, 550 / 24]))
    assert s["median_e2el_ms"] == pytest.approx(500.0)


def test_the_replay_command_reads_it_and_counts_the_failed_request(tmp_path, capsys):
    p = _write(tmp_path, _result())
    assert main(["replay", "--requests", str(p), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000"]) == 0
    out = capsys.readouterr().out
    assert "mean_ttft_ms" in out and " 46.0 " in out
    assert "1 failed request(s) of the run not replayed" in out


def test_a_result_without_per_request_records_is_one_clear_line(tmp_path):
    obj = _result()
    del obj["start_times"]
    with pytest.raises(TraceError, match=r"without per-request \['start_times'\].*--save-detailed"):
        read_requests(_write(tmp_path, obj))
    with pytest.raises(TraceError, match=r"ttfts: expected a list of one entry per request .*got list of 1"):
        read_requests(_write(tmp_path, _result(ttfts=[0.1])))
    with pytest.raises(TraceError, match=r"input_lens: expected a list of one entry per request .*got int"):
        read_requests(_write(tmp_path, _result(input_lens=6)))
    with pytest.raises(TraceError, match=r"request index 1: output_lens: expected an integer"):
        read_requests(_write(tmp_path, _result(output_lens=[20, -3, 0, 10, 1, 25])))


def test_non_causal_measured_latencies_are_one_clear_line(tmp_path):
    """A first token before the arrival (or a last before the first) is a clock mix-up: named, never averaged."""
    with pytest.raises(TraceError, match=r"request index 1: measured TTFT -0.06 s.*expected 0 <= TTFT <= E2E"):
        read_requests(_write(tmp_path, _result(ttfts=[0.05, -0.06, 0.0, 0.04, 0.03, 0.05])))
    rows = [{"queued_ts": 10.0, "first_token_ts": 10.1, "last_token_ts": 11.0, "input_toks": 9, "output_toks": 5},
            {"queued_ts": 11.0, "first_token_ts": 10.0, "last_token_ts": 12.0, "input_toks": 9, "output_toks": 5}]
    jl = tmp_path / "requests.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(TraceError, match=r"requests.jsonl: line 2: measured TTFT -1 s, E2E 1 s"):
        read_requests(jl)
    csv = tmp_path / "run.csv"
    csv.write_text("arrival,prompt_tokens,output_tokens,ttft,e2e\n0,9,5,0.1,1\n1,9,5,0.5,0.2\n")
    with pytest.raises(TraceError, match=r"run.csv: line 3: measured TTFT 0.5 s, E2E 0.2 s"):
        read_requests(csv)
