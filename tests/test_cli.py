"""The Hydra CLI runs, prints the vllm-bench style summary, saves outputs, and sweeps."""

import json
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("override,names", [
    ("+cluster.instances.0.gpus=a100", ["cluster.instances[0]", "'gpus'", "'gpu'"]),  # and the likely key
    ("+sim.bogus=1", ["sim", "'bogus'", "metrics_interval"]),
])
def test_bad_key_gives_one_clear_line_naming_it(tmp_path, override, names):
    p = run_cli([override, "output.plots=false", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), p.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert not (tmp_path / "run" / "summary.json").exists()


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
