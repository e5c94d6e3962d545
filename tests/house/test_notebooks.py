"""The notebooks, run the way a user runs them: on a real Jupyter kernel ("python3", through nbclient), top to
bottom, with small parameters injected as a new cell right after the cell tagged "parameters" (as papermill
does), in a temporary copy whose working directory is a tmp_path, so nothing is written into the repository.
Each test then checks what the notebook computed and wrote (tables, evaluation.json, figures), so a notebook that
runs but computes nothing useful fails. The stored files carry no outputs and no execution counts.

CI has 2 cores and runs two tests at once: every injected parameter set keeps one notebook run well under a
minute. docs/notebooks.md describes the notebooks and their parameters.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import REPO, SHARED

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = REPO / "notebooks"
TRACES = SHARED / "traces"
TESTED = ("rate_sweep.ipynb", "trace_replay.ipynb", "train_evaluate.ipynb")  # each has a run test below
PNG = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------- helpers
def _load(name: str):
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def _parameter_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]


def run_notebook(name: str, tmp_path: Path, params: str):
    """Execute a temp copy of notebooks/<name> with ``params`` injected after its parameters cell; working
    directory ``tmp_path``. Returns the executed notebook (also written as ``tmp_path / name``)."""
    stored = (NOTEBOOKS / name).read_bytes()
    listing = sorted(p.name for p in NOTEBOOKS.iterdir())
    nb = _load(name)
    (at,) = _parameter_cells(nb)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(params, metadata={"tags": ["injected-parameters"]}))
    copy = tmp_path / name
    nbformat.write(nb, copy)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=150, startup_timeout=90,
                                     resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    finally:
        nbformat.write(nb, copy)  # executed, with its outputs: look here when a test fails
    assert (NOTEBOOKS / name).read_bytes() == stored, "running the notebook changed the stored file"
    assert sorted(p.name for p in NOTEBOOKS.iterdir()) == listing, "running the notebook wrote into notebooks/"
    return nb


def stdout(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream" and o.name == "stdout")


def assert_png(path: Path) -> None:
    assert path.is_file(), f"figure not written: {path}"
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 10_000, path


def assert_finite(frame: pd.DataFrame, columns: list[str]) -> None:
    values = frame[columns].to_numpy(dtype=float)
    assert values.size and all(math.isfinite(v) for v in values.flat), frame[columns]


# ---------------------------------------------------------------------------------------------- stored files
def test_every_notebook_is_run_by_a_test():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(TESTED)


@pytest.mark.parametrize("name", TESTED)
def test_stored_without_outputs_and_with_one_parameters_cell(name):
    nb = _load(name)
    nbformat.validate(nb)
    assert nb.nbformat == 4 and nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] for c in code), "stored with outputs: clear them before committing"
    assert all(c.execution_count is None for c in code), "stored with execution counts"
    assert all("attachments" not in c for c in nb.cells)
    params = _parameter_cells(nb)
    assert len(params) == 1, 'exactly one cell must be tagged "parameters"'
    cell = nb.cells[params[0]]
    assert cell is code[0], "the parameters cell must be the first code cell"
    # only assignments of literals, so papermill / the tests can override any of them in a cell after it
    for stmt in ast.parse(cell.source).body:
        assert isinstance(stmt, ast.Assign), ast.unparse(stmt)
        ast.literal_eval(stmt.value)


# ---------------------------------------------------------------------------------------------- rate_sweep
RATE_SWEEP = """
CLUSTER = "single_a100"
POLICIES = ["round_robin", "jsq"]
RATES = [1, 4, 16]
NUM_REQUESTS = 150
CAPACITY_SEEDS = 2
CAPACITY_REQUESTS = 150
CAPACITY_TOLERANCE = 0.1
WORKERS = 1
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rate_sweep_runs_with_jupyter_nbconvert_as_documented(tmp_path):
    """docs/notebooks.md's command, default parameters: the way a user runs a notebook with the notebooks extra."""
    jupyter = Path(sys.executable).parent / "jupyter"
    if not jupyter.exists() or importlib.util.find_spec("nbconvert") is None:
        pytest.skip("jupyter nbconvert is not installed (pip install -e '.[notebooks]')")
    shutil.copy(NOTEBOOKS / "rate_sweep.ipynb", tmp_path / "rate_sweep.ipynb")
    p = subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "rate_sweep.ipynb",
                        "--output-dir", str(tmp_path / "executed"), "--ExecutePreprocessor.timeout=280"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=290)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "rate_sweep_out" / "sweep.csv").exists()
    assert (tmp_path / "executed" / "rate_sweep.ipynb").exists()


@pytest.mark.timeout(180)
def test_rate_sweep(tmp_path):
    nb = run_notebook("rate_sweep.ipynb", tmp_path, RATE_SWEEP)
    out = tmp_path / "rate_sweep_out"
    sweep = pd.read_csv(out / "sweep.csv")
    policies, rates = ["round_robin", "jsq"], [1, 4, 16]
    assert len(sweep) == len(policies) * len(rates)
    assert set(sweep["policy"]) == set(policies) and set(sweep["workload.rate"]) == set(rates)
    assert (sweep["completed"] == 150).all()
    latency = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "e2el") for s in ("median", "p99")]
    assert_finite(sweep, [*latency, "slo_attainment", "request_goodput", "request_throughput"])
    for m in ("ttft", "e2el"):
        assert (sweep[f"p99_{m}_ms"] >= sweep[f"median_{m}_ms"]).all()
    for _, g in sweep.groupby("policy"):  # one A100: 1 req/s is easy, 16 req/s is far past its capacity
        g = g.sort_values("workload.rate")
        assert g["slo_attainment"].iloc[0] >= 0.9 > g["slo_attainment"].iloc[-1]
        assert g["median_e2el_ms"].iloc[-1] > g["median_e2el_ms"].iloc[0]
    rows = json.loads((out / "capacity" / "capacity.json").read_text())
    assert [r["policy"] for r in rows] == policies
    for r in rows:  # the search's capacity lies where the sweep crosses the target
        lo, hi = r["bracket"]
        assert 1 < r["capacity_rps"] == lo < hi < 16, r
        assert hi / lo - 1 <= 0.1 + 1e-9 and r["goodput_at_capacity"] > 0
    assert "simulations of 150 requests" in stdout(nb)
    for fig in ("sweep.png", "capacity_vs_sweep.png", "capacity/capacity.png"):
        assert_png(out / fig)


# ---------------------------------------------------------------------------------------------- trace_replay
def _check_trace_replay(tmp_path: Path, nb, policies: list[str], max_requests: int, horizon_s: float) -> None:
    out = tmp_path / "trace_replay_out"
    trace = pd.read_csv(out / "trace.csv")
    assert 10 <= len(trace) <= max_requests
    assert trace["arrival_s"].is_monotonic_increasing and trace["arrival_s"].max() < horizon_s
    assert (trace[["prompt_tokens", "output_tokens"]] >= 1).all().all()
    results = pd.read_csv(out / "results.csv", index_col="policy")
    assert list(results.index) == policies
    assert ((results["completed"] + results["dropped"]) == len(trace)).all()
    assert (results["completed"] > 0).all()
    assert_finite(results, ["median_e2el_ms", "p99_e2el_ms", "median_ttft_ms", "p99_ttft_ms", "slo_attainment"])
    assert (results["p99_e2el_ms"] >= results["median_e2el_ms"]).all()
    assert results["slo_attainment"].between(0, 1).all()
    for fig in ("trace.png", "latency.png"):
        assert_png(out / fig)


@pytest.mark.timeout(150)
def test_trace_replay_falls_back_to_the_burstgpt_like_generator(tmp_path):
    """No trace file at the given path: the generator replaces it, says so, and the rest runs on it."""
    missing = tmp_path / "BurstGPT_1.csv"
    params = (f'TRACE = "burstgpt"\nTRACE_PATH = {str(missing)!r}\nWINDOW = [0, 120]\nRATE_SCALE = 2.0\n'
              'MAX_REQUESTS = 80\nGENERATOR_RATE = 2.0\nPOLICIES = ["round_robin", "least_kv"]\n')
    nb = run_notebook("trace_replay.ipynb", tmp_path, params)
    text = stdout(nb)
    assert f"no burstgpt trace file ({missing})" in text and "source: burstgpt_like" in text
    _check_trace_replay(tmp_path, nb, ["round_robin", "least_kv"], 80, 120 / 2.0)


REAL_TRACES = {"azure_conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
               "mooncake": "mooncake/conversation_trace.jsonl"}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("trace", sorted(REAL_TRACES))
def test_trace_replay_on_a_real_trace(tmp_path, trace):
    """The default path (../shared/traces next to the repository) is found and replayed, windowed and scaled."""
    if not (TRACES / REAL_TRACES[trace]).is_file():
        pytest.skip(f"trace file {TRACES / REAL_TRACES[trace]} is not on this machine")
    params = (f'TRACE = "{trace}"\nWINDOW = [60, 240]\nRATE_SCALE = 1.5\nMAX_REQUESTS = 50\n'
              'POLICIES = ["round_robin", "jsq"]\n')
    nb = run_notebook("trace_replay.ipynb", tmp_path, params)
    text = stdout(nb)
    path = TRACES / REAL_TRACES[trace]  # (../shared may be a link: the notebook names it as found, not resolved)
    assert f"source: {trace}" in text and (str(path.resolve()) in text or str(path.absolute()) in text), text
    _check_trace_replay(tmp_path, nb, ["round_robin", "jsq"], 50, (240 - 60) / 1.5)


# ---------------------------------------------------------------------------------------------- train_evaluate
TRAIN_EVALUATE = """
EPISODE_REQUESTS = 40
TRAIN_STEPS = 600
EVAL_EVERY = 300
AGENT = {"hidden": [32, 32], "batch_size": 64, "learning_starts": 200, "buffer_size": 5000, "train_freq": 4,
         "target_update": 200, "eps_fraction": 0.5}
BASELINES = ["round_robin", "jsq"]
EVAL_SEEDS = [1000, 1001]
REPLAY_WINDOW = [0, 300]
REPLAY_REQUESTS = 40
"""


@pytest.mark.timeout(180)
def test_train_evaluate(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    nb = run_notebook("train_evaluate.ipynb", tmp_path, TRAIN_EVALUATE)
    out = tmp_path / "train_evaluate_out"
    run = out / "train"
    assert (run / "best" / "checkpoint.json").is_file() and list((run / "tensorboard").glob("events.out.tfevents.*"))
    text = stdout(nb)
    assert re.search(r"trained 6\d\d steps", text), text
    curves = ast.literal_eval(re.search(r"^\{'rollout/.*\}$", text, re.M).group(0))
    assert curves["rollout/ep_return"] >= 2 and curves["eval/return"] == 2 and curves["train/loss"] >= 1

    label = json.loads((run / "best" / "checkpoint.json").read_text()).get("label") or "ddqn"
    policies = {label, "round_robin", "jsq"}
    held_out = json.loads((out / "evaluation" / "evaluation.json").read_text())
    assert held_out["seeds"] == [1000, 1001] and held_out["env"]["workload"]["kind"] == "synthetic"
    assert {r["policy"] for r in held_out["rows"]} == policies and len(held_out["rows"]) == 6
    assert {s["policy"] for s in held_out["summary"]} == policies
    for s in held_out["summary"]:
        assert all(math.isfinite(s[k]) for k in ("median_e2el_ms_mean", "p99_e2el_ms_mean", "mean_ttft_ms_mean"))
        assert s["completed_mean"] > 0

    replay = json.loads((out / "replay" / "evaluation.json").read_text())
    workload = replay["env"]["workload"]
    code_trace = TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    if code_trace.is_file():  # the default unseen trace; without it the notebook replays the generator
        assert workload["kind"] == "azure" and Path(workload["path"]).resolve() == code_trace.resolve()
    else:
        assert workload["kind"] == "burstgpt_like"
    assert {r["policy"] for r in replay["rows"]} == policies
    assert all(r["completed"] > 0 and math.isfinite(r["median_e2el_ms"]) for r in replay["rows"])
    for fig in ("learning_curves.png", "evaluation_vs_baselines.png", "evaluation/evaluation.png"):
        assert_png(out / fig)
