"""The Hydra CLI runs, prints the vllm-bench style summary, saves outputs, and sweeps."""

import json
import subprocess
import sys

from tests.conftest import REPO


def run_cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "llmsim", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_default_run_prints_summary_and_saves(tmp_path):
    p = run_cli(["workload.num_requests=200", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Mean TTFT (ms)" in p.stdout and "Successful requests" in p.stdout
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] == 200
    for f in ("requests.csv", "timeline.csv", "instances.csv", "latency_cdf.png", "timeline.png"):
        assert (run / f).exists(), f


def test_bad_key_gives_clear_error(tmp_path):
    p = run_cli(["+cluster.instances.0.gpus=a100", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode != 0


def test_multirun_sweep_and_report(tmp_path):
    p = run_cli(["-m", "workload.rate=2,6", "workload.num_requests=100", "output.plots=false",
                 f"hydra.sweep.dir={tmp_path}/sweep"], tmp_path)
    assert p.returncode == 0, p.stderr
    jobs = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert len(jobs) == 2
    r = subprocess.run([sys.executable, "-m", "llmsim.report", str(tmp_path / "sweep")], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "sweep" / "sweep.csv").exists()


def test_trace_replay_from_another_directory(tmp_path, shared_dir):
    p = run_cli(["workload=azure_conv", "workload.max_requests=300", "sim.on_unservable=drop",
                 "output.plots=false", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["completed"] + s["dropped"] == 300
