"""Trace rows an env's workload reads but leaves out (over ``max_prompt``, zero output, ...) are counted and reported
in the episode's summary (``workload_skipped``, as a simulator run's), and in evaluation.md: never dropped in
silence."""

from __future__ import annotations

import json
from pathlib import Path

from llmsim.agents.evaluate import run_app
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.testbeds import make_from_config


def _trace(tmp_path: Path) -> str:
    """Ten Azure rows a second apart, every other one with a 5,000-token prompt."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{i:02d}.000000,{50 if i % 2 else 5000},20\n" for i in range(10)))
    return str(path)


def _final_info(env: RoutingEnv) -> dict:
    _, info = env.reset(seed=0)
    done = "summary" in info
    while not done:
        _, _, term, trunc, info = env.step(int(env.action_masks().nonzero()[0][0]))
        done = term or trunc
    return info


def test_a_trace_workload_reports_the_rows_over_max_prompt(tmp_path):
    env = RoutingEnv({"workload": {"kind": "azure", "path": _trace(tmp_path), "max_prompt": 4000},
                      "num_requests": 100})
    summary = _final_info(env)["summary"]
    assert summary["num_requests"] == 5
    assert summary["workload_skipped"] == {"prompt_over_max_prompt": 5}
    assert env.summary()["workload_skipped"] == {"prompt_over_max_prompt": 5}


def test_trace_arrivals_report_the_rows_whose_times_they_left_out(tmp_path):
    trace = {"kind": "azure", "path": _trace(tmp_path), "max_prompt": 4000}
    env = make_from_config({"id": "qos_edge", "num_requests": 50, "arrival": {"kind": "trace", "trace": trace}})
    summary = _final_info(env)["summary"]
    assert summary["num_requests"] == 5 and summary["workload_skipped"] == {"prompt_over_max_prompt": 5}


def test_a_drawn_workload_has_no_rows_to_skip():
    env = RoutingEnv({"num_requests": 5})
    assert "workload_skipped" not in _final_info(env)["summary"]


def test_evaluation_notes_the_skipped_rows(tmp_path):
    env = {"id": "routing", "num_requests": 100,
           "workload": {"kind": "azure", "path": _trace(tmp_path), "max_prompt": 4000}}
    out = tmp_path / "out"
    run_app({"env": env, "baselines": ["round_robin", "jsq"], "seeds": [2000, 2001], "progress": False,
             "plots": False}, out, quiet=True)
    body = json.loads((out / "evaluation.json").read_text())
    assert [r["workload_skipped"] for r in body["rows"]] == [{"prompt_over_max_prompt": 5}] * 4
    assert body["workload_skipped"] == {"prompt_over_max_prompt": 10}  # two episodes of one policy
    assert "Trace rows skipped" in (out / "evaluation.md").read_text()
    assert "{'prompt_over_max_prompt': 10}" in (out / "evaluation.md").read_text()
