"""``python -m llmsim.cli.collect``: one table out of a sweep whatever launched it (basic / joblib directory layout,
submitit's ``.submitit/`` beside the runs, several multiruns under one directory), failed runs listed with the
line that says why, CSV and Parquet alike, one-line errors for what is not a sweep. Fixture sweeps are written
by hand here; tests/test_launchers.py collects real multiruns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from llmsim.cli.collect import collect, failure_reason, find_runs, last_line, main, parquet_ready
from tests.helpers import REPO

SUMMARY = {"completed": 40, "num_requests": 40, "request_throughput": 2.5, "median_ttft_ms": 80.0,
           "p99_ttft_ms": 200.0, "slo_attainment": 1.0, "dropped": 0, "dropped_by_reason": {}}


def _multirun_yaml(sweep: Path, target: str, task: list[str] | None = None) -> None:
    sweep.mkdir(parents=True, exist_ok=True)
    hydra = {"launcher": {"_target_": target},
             "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None}}
    if task is not None:
        hydra["overrides"] = {"task": task}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))


def _run(sweep: Path, num: int, overrides: list[str], summary: dict | None, job_id: str | None = None,
         log: str = "") -> Path:
    """A Hydra job directory as ``llmsim -m`` leaves it: .hydra/ always, summary.json only if it got that far."""
    run = sweep / f"{num}_{','.join(overrides)}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"job": {"id": job_id, "num": num}}}))
    (run / "llmsim.log").write_text(log)
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))
    return run


def basic_sweep(root: Path, target: str = "hydra._internal.core_plugins.basic_launcher.BasicLauncher") -> Path:
    """3 runs: two with summaries (policy x rate), one that failed before writing one (nothing logged)."""
    _multirun_yaml(root, target)
    _run(root, 0, ["policy=jsq", "workload.rate=2"], SUMMARY)
    _run(root, 1, ["policy=round_robin", "workload.rate=2"], {**SUMMARY, "median_ttft_ms": 90.0})
    _run(root, 2, ["policy=jsq", "workload.rate=-1"], None)
    return root


def submitit_sweep(root: Path) -> Path:
    """submitit's layout: runs numbered as usual, logs in .submitit/<job id>/; job 7_2's run failed (its error
    log says why), job 7_3 never made a run directory (lost with its node)."""
    _multirun_yaml(root, "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher")
    for num, rate in enumerate((2, 4)):
        _run(root, num, [f"workload.rate={rate}"], {**SUMMARY, "request_throughput": rate}, job_id=f"7_{num}")
    _run(root, 2, ["workload.rate=-1"], None, job_id="7_2")
    for task in range(4):
        folder = root / ".submitit" / f"7_{task}"
        folder.mkdir(parents=True)
        (folder / f"7_{task}_0_log.out").write_text("submitit INFO - Starting with JobEnvironment(...)\n")
        err = ("llmsim: error: workload.rate: expected a value > 0, got -1\n\n"  # then srun's line (real Slurm)
               "srun: error: node12: task 0: Exited with exit code 2\n") if task == 2 else ""
        if task == 3:
            err = "slurmstepd: error: *** JOB 7 ON node12 CANCELLED DUE TO TIME LIMIT ***\n"
        (folder / f"7_{task}_0_log.err").write_text(err)
    (root / ".submitit" / "%j").mkdir()  # submitit leaves its unexpanded folder pattern behind
    (root / ".submitit" / "7").mkdir()  # and, on Slurm, the array's sbatch script (seen on a real slurmd)
    (root / ".submitit" / "7" / "7_submission.sh").write_text("#!/bin/bash\n#SBATCH --array=0-3%256\n")
    return root


def test_basic_layout_lists_the_failed_run_and_keeps_the_rest(tmp_path):
    col = collect(basic_sweep(tmp_path / "sweep"))
    assert len(col.frame) == 3 and len(col.ok) == 2 and len(col.failed) == 1
    assert col.keys == ["policy", "workload.rate"]
    assert list(col.frame.columns[:2]) == ["policy", "workload.rate"]
    assert list(col.frame.columns[-4:]) == ["status", "source", "error", "job_dir"]
    assert col.frame["workload.rate"].tolist() == [2, 2, -1]  # typed as in sweep.csv, job order kept
    assert col.ok["median_ttft_ms"].tolist() == [80.0, 90.0]
    assert "dropped_by_reason" not in col.frame  # nested values stay out of the table
    failed = col.failed.iloc[0]
    assert failed["job_dir"].endswith("2_policy=jsq,workload.rate=-1")
    assert "no summary" in failed["error"]
    assert col.launchers == ["BasicLauncher"]


def test_submitit_layout_reads_the_error_logs_and_finds_jobs_without_a_run(tmp_path):
    col = collect(submitit_sweep(tmp_path / "sweep"))
    assert len(col.ok) == 2 and len(col.failed) == 2
    errors = dict(zip(col.failed["job_dir"].map(lambda p: Path(p).name), col.failed["error"]))
    assert errors["2_workload.rate=-1"] == "llmsim: error: workload.rate: expected a value > 0, got -1 (7_2_0_log.err)"
    assert errors["7_3"].startswith("slurmstepd: error: *** JOB 7 ON node12 CANCELLED DUE TO TIME LIMIT")
    assert "%j" not in errors and "7" not in errors  # the array's own script folder is not a job
    assert col.launchers == ["SlurmLauncher"]


def test_joblib_layout_and_nested_multiruns_make_one_table(tmp_path):
    """A grouped Slurm sweep leaves one multirun per Slurm job under a common root: one table for all."""
    basic_sweep(tmp_path / "root" / "block_0", "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher")
    submitit_sweep(tmp_path / "root" / "block_1")
    col = collect(tmp_path / "root")
    assert len(col.frame) == 3 + 4 and len(col.ok) == 4
    assert col.keys == ["policy", "workload.rate"]
    assert col.launchers == ["JoblibLauncher", "SlurmLauncher"]
    assert [Path(p).parent.name for p in col.ok["job_dir"]] == ["block_0", "block_0", "block_1", "block_1"]


def test_jobs_a_stopped_sweep_never_started_are_listed_with_their_overrides(tmp_path, capsys):
    """The basic and joblib launchers stop a sweep at its first failing job: multirun.yaml says what was asked."""
    sweep = tmp_path / "sweep"
    _multirun_yaml(sweep, "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
                   ["policy=jsq,round_robin", "workload.rate=range(1,4)", "output.plots=false"])
    _run(sweep, 0, ["policy=jsq", "workload.rate=1", "output.plots=false"], SUMMARY)
    _run(sweep, 1, ["policy=jsq", "workload.rate=2", "output.plots=false"], None)
    col = collect(sweep)
    assert (len(col.ok), len(col.frame)) == (1, 6)
    missing = col.frame[col.frame["status"] == "missing"]
    assert list(zip(missing["policy"], missing["workload.rate"])) == [("jsq", 3), ("round_robin", 1),
                                                                      ("round_robin", 2), ("round_robin", 3)]
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "collected 1 run, 1 failed, 4 never started" in out
    assert "missing: " in out and "policy=round_robin workload.rate=3: no run directory" in out


def test_training_and_evaluation_runs(tmp_path):
    sweep = tmp_path / "sweep"
    train = _run(sweep, 0, ["seed=0", "trainer.num_envs=2"], None)
    (train / "training.json").write_text(json.dumps({"agent": "ddqn", "steps": 1000, "best_score": -3.5,
                                                     "wall_s": 12.0, "env": {"n": 4},
                                                     "evaluations": [{"step": 500, "return": -4.0},
                                                                     {"step": 1000, "return": -3.5}]}))
    ev = _run(sweep, 1, ["seed=1", "trainer.num_envs=2"], None)
    (ev / "evaluation.json").write_text(json.dumps({"summary": [{"policy": "ddqn", "mean_e2el_ms_mean": 900.0},
                                                                {"policy": "jsq", "mean_e2el_ms_mean": 950.0}]}))
    col = collect(sweep)
    assert col.failed.empty
    assert col.frame["source"].tolist() == ["training.json", "evaluation.json", "evaluation.json"]
    first = col.frame.iloc[0]
    assert (first["steps"], first["final_return"], first["final_step"]) == (1000, -3.5, 1000)
    assert col.frame["policy"].tolist()[1:] == ["ddqn", "jsq"]


def test_cli_writes_csv_and_parquet_with_the_same_rows(tmp_path, capsys):
    sweep = basic_sweep(tmp_path / "sweep")
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("collected 2 runs, 1 failed, from ")
    assert "failed: " in out and "wrote " in out
    csv, parquet = pd.read_csv(sweep / "collect.csv"), pd.read_parquet(sweep / "collect.parquet")
    assert len(csv) == len(parquet) == 3
    assert list(csv.columns) == list(parquet.columns)
    assert parquet["status"].tolist() == ["ok", "ok", "failed"]


def test_out_option(tmp_path, capsys):
    sweep = basic_sweep(tmp_path / "sweep")
    assert main([str(sweep), "--out", str(tmp_path / "tables" / "all.csv")]) == 0
    assert (tmp_path / "tables" / "all.csv").is_file() and (tmp_path / "tables" / "all.parquet").is_file()
    assert main([str(sweep), "--out", str(tmp_path / "dir")]) == 0
    assert (tmp_path / "dir" / "collect.parquet").is_file()
    assert not (sweep / "collect.csv").exists()


def test_a_column_of_mixed_types_is_text_in_parquet(tmp_path):
    frame = pd.DataFrame({"workload.prompt": [128, "azure_conv_like", None], "rate": [1, 2, 3]})
    out = parquet_ready(frame)
    assert out["workload.prompt"].tolist()[:2] == ["128", "azure_conv_like"]
    out.to_parquet(tmp_path / "x.parquet")
    back = pd.read_parquet(tmp_path / "x.parquet")
    assert pd.isna(back["workload.prompt"][2]) and back["rate"].tolist() == [1, 2, 3]


def test_every_run_failed_exits_1(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _run(sweep, 0, ["workload.rate=-1"], None, log="something went wrong\n")
    assert main([str(sweep)]) == 1
    captured = capsys.readouterr()
    assert "failed: " in captured.out and "something went wrong (llmsim.log)" in captured.out
    assert "no run has a summary" in captured.err


@pytest.mark.parametrize("what", ["missing", "empty", "single_run"])
def test_not_a_sweep_is_one_line_and_exit_2(tmp_path, capsys, what):
    target = tmp_path / "x"
    if what == "empty":
        target.mkdir()
    elif what == "single_run":
        target = _run(tmp_path, 0, ["seed=0"], SUMMARY)
    assert main([str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("llmsim.cli.collect: error: ")
    assert {"missing": "no such directory", "empty": "no run directories",
            "single_run": "a single run's directory"}[what] in err


def test_unreadable_summary_is_a_failed_row_not_a_crash(tmp_path):
    sweep = basic_sweep(tmp_path / "sweep")
    (next(sweep.glob("0_*")) / "summary.json").write_text("{not json")
    col = collect(sweep)
    assert len(col.ok) == 1 and len(col.failed) == 2
    assert "summary.json: unreadable" in col.failed.iloc[0]["error"]


def test_runs_are_found_in_job_order_and_their_subdirectories_skipped(tmp_path):
    for num in (10, 2, 1):
        run = _run(tmp_path, num, [f"seed={num}"], SUMMARY)
        (run / "best" / ".hydra").mkdir(parents=True)  # a checkpoint inside a run is not a run
    assert [p.name for p in find_runs(tmp_path)] == ["1_seed=1", "2_seed=2", "10_seed=10"]


def test_last_line_and_reason_read_only_the_tail(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("x" * 100_000 + "\nfirst\nlast line\n\n")
    assert last_line(log) == "last line"
    assert last_line(tmp_path / "missing.log") is None
    run = _run(tmp_path, 0, ["seed=0"], None)
    (run / "job.err").write_text("Traceback ...\nValueError: boom\n")
    assert failure_reason(run) == "ValueError: boom (job.err)"


@pytest.mark.timeout(60)
def test_module_runs_and_imports_no_heavy_package(tmp_path):
    """The collector runs where the sweep's files are (a login node): no torch, gymnasium nor matplotlib at import.
    (Hydra's override grammar it does import, at the top: it is what types the override columns.)"""
    code = ("import sys, llmsim.cli.collect; bad = {'torch', 'gymnasium', 'matplotlib'} & "
            "{m.split('.')[0] for m in sys.modules}; assert not bad, bad")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True).returncode == 0
    sweep = basic_sweep(tmp_path / "sweep")
    p = subprocess.run([sys.executable, "-m", "llmsim.cli.collect", str(sweep)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "collected 2 runs, 1 failed" in p.stdout


# ---------------------------------------------------------------------- failed runs that left no run directory
def _submitit_job(sweep: Path, job_id: str, err: str) -> None:
    """What submitit leaves of a job whose run failed and removed its run directory: its logs."""
    folder = sweep / ".submitit" / job_id
    folder.mkdir(parents=True)
    (folder / f"{job_id}_0_log.out").write_text("submitit INFO - Starting with JobEnvironment(...)\n")
    (folder / f"{job_id}_0_log.err").write_text(err)


def test_a_failed_submitit_job_without_a_run_gets_its_overrides(tmp_path):
    """A run that fails removes its directory; under submitit its logs stay. The planned jobs without a run and
    the submitit jobs without a run are the same jobs, in submission order: local jobs are numbered by process
    id (job 998 before job 1002, though "1002" < "998" as text)."""
    sweep = tmp_path / "sweep"
    _multirun_yaml(sweep, "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
                   ["workload.rate=1,-1,2,-2"])
    for num, rate, job in ((0, 1, "997"), (2, 2, "1000")):
        _run(sweep, num, [f"workload.rate={rate}"], SUMMARY, job_id=job)
        _submitit_job(sweep, job, "")
    _submitit_job(sweep, "998", "llmsim: error: workload.rate: expected a value > 0, got -1\n")
    _submitit_job(sweep, "1002", "llmsim: error: workload.rate: expected a value > 0, got -2\n")
    col = collect(sweep)
    assert col.ok["workload.rate"].tolist() == [1, 2] and len(col.failed) == 2
    assert (col.failed["status"] == "failed").all()
    for rate, job in ((-1, "998"), (-2, "1002")):
        row = col.failed[col.failed["workload.rate"] == rate].iloc[0]
        assert row["error"] == f"llmsim: error: workload.rate: expected a value > 0, got {rate} ({job}_0_log.err)"
        assert Path(row["job_dir"]).name == job


def test_a_sweep_whose_every_job_failed_is_collected_and_exits_1(tmp_path, capsys):
    """No run directory at all: multirun.yaml still says what was asked, so it is a sweep, every job failed."""
    sweep = tmp_path / "sweep"
    _multirun_yaml(sweep, "hydra._internal.core_plugins.basic_launcher.BasicLauncher", ["workload.rate=-1,-2"])
    assert main([str(sweep)]) == 1
    col = collect(sweep)
    assert col.keys == ["workload.rate"] and col.frame["workload.rate"].tolist() == [-1, -2]
    assert (col.frame["status"] == "missing").all() and col.frame["error"].str.contains("the job failed").all()
    assert "no run has a summary" in capsys.readouterr().err


@pytest.mark.parametrize("first", ["block_0", "block_1"])
def test_the_table_does_not_depend_on_the_order_the_file_system_lists_directories(tmp_path, monkeypatch, first):
    """Two stopped sweeps under one root: their never-started jobs come in the same rows and columns whichever
    directory the file system lists first (a copied or another file system's tree lists them in another order)."""
    _multirun_yaml(tmp_path / "root" / "block_0", "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
                   ["workload.rate=-1,-2"])
    _multirun_yaml(tmp_path / "root" / "block_1", "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
                   ["policy=jsq,round_robin"])
    real_walk = os.walk

    def walk(top, *args, **kwargs):  # the file system's listing order, with ``first`` listed first
        for here, dirs, files in real_walk(top, *args, **kwargs):
            dirs.sort(key=lambda d: (d != first, d))
            yield here, dirs, files

    monkeypatch.setattr("llmsim.cli.collect.os.walk", walk)
    col = collect(tmp_path / "root")
    assert col.keys == ["workload.rate", "policy"]
    assert [Path(p).name for p in col.frame["job_dir"]] == ["block_0"] * 2 + ["block_1"] * 2
