"""The Hydra launchers of conf/hydra/launcher/ (docs/scale-out.md): each resolves for both apps (`llmsim`,
`llmsim-train`), and real tiny multiruns with joblib (2 workers) and with submitit's local executor (the Slurm
code path) are collected by ``llmsim.cli.collect`` into one table; the `slurm` config also through a real
sbatch where a Slurm controller answers (skipped elsewhere). Everything is written under tmp_path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from llmsim.cli.collect import collect
from llmsim.resources import conf_dir
from tests.helpers import REPO

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

OURS = sorted(p.stem for p in (REPO / "conf" / "hydra" / "launcher").glob("*.yaml"))
TARGETS = {"joblib_local": "JoblibLauncher", "slurm": "SlurmLauncher", "slurm_local": "LocalLauncher",
           "joblib": "JoblibLauncher", "submitit_local": "LocalLauncher", "submitit_slurm": "SlurmLauncher"}
# a tiny simulation: 20 requests, no plots, no progress line
TINY = ["workload.num_requests=20", "output.plots=false", "output.progress=false"]


def test_the_shipped_launchers_are_the_documented_ones():
    assert OURS == ["joblib_local", "slurm", "slurm_local"]
    doc = (REPO / "docs" / "scale-out.md").read_text()
    assert all(f"hydra/launcher={name}" in doc for name in OURS)


@pytest.mark.parametrize("app", ["config", "train"])
@pytest.mark.parametrize("name", [*OURS, "joblib", "submitit_local", "submitit_slurm"])
def test_launcher_resolves_for_both_apps(app: str, name: str):
    """Ours and the plugins' own names, through the same search path the apps use (config_path = conf/)."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name=app, overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.rsplit(".", 1)[-1] == TARGETS[name]
    if name == "joblib_local":
        assert launcher.n_jobs == 2
    if name == "slurm":
        assert (launcher.cpus_per_task, launcher.timeout_min, launcher.array_parallelism) == (1, 60, 256)
        assert any("OMP_NUM_THREADS=1" in line for line in launcher.setup)
    if name == "slurm_local":
        assert (launcher.cpus_per_task, launcher.timeout_min) == (1, 30)


def _start(tmp_path: Path, sweep: Path, *overrides: str) -> subprocess.Popen:
    """``llmsim -m`` of TINY runs into ``sweep``, started in tmp_path (so nothing lands in the repository)."""
    return subprocess.Popen([sys.executable, "-m", "llmsim", "-m", *overrides, *TINY, f"hydra.sweep.dir={sweep}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MPLBACKEND": "Agg"})


def _wait(p: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = p.communicate(timeout=170)  # a hang bound (a run of TINY takes seconds; a loaded machine, more)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _multirun(tmp_path: Path, sweep: Path, *overrides: str) -> subprocess.CompletedProcess:
    return _wait(_start(tmp_path, sweep, *overrides))


@pytest.mark.timeout(180)
def test_joblib_multirun_is_collected(tmp_path):
    sweep = tmp_path / "sweeps" / "joblib"
    p = _multirun(tmp_path, sweep, "hydra/launcher=joblib_local", "hydra.launcher.n_jobs=2",
                  "policy=jsq,round_robin")
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"sweep: 2 runs in {sweep}" in p.stdout
    col = collect(sweep)
    assert len(col.ok) == 2 and col.failed.empty
    assert col.ok["policy"].tolist() == ["jsq", "round_robin"]
    assert (col.ok["completed"] == 20).all()
    assert col.launchers == ["JoblibLauncher"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweeps"]  # nothing written beside it


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_submitit_local_multirun_with_a_failed_job_is_collected(tmp_path):
    """The failing job makes the sweep exit non-zero (submitit re-raises it) and leaves no run directory; collect
    lists it with its overrides and the error line from its .submitit/<job>/ log, and keeps the other run."""
    sweep = tmp_path / "sweeps" / "submitit"
    p = _multirun(tmp_path, sweep, "hydra/launcher=slurm_local", "workload.rate=2,-1")
    assert p.returncode != 0
    col = collect(sweep)
    assert len(col.ok) == 1 and len(col.failed) == 1
    assert col.ok["workload.rate"].tolist() == [2]
    failed = col.failed.iloc[0]
    assert failed["workload.rate"] == -1
    assert failed["error"].startswith("llmsim: error: workload.rate: expected a value > 0, got -1 (")
    assert failed["error"].endswith("_0_log.err)")
    assert col.launchers == ["LocalLauncher"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_both_launchers_collected_into_one_table(tmp_path):
    """A joblib sweep and a submitit-local sweep under one directory: one table, one row per run."""
    root = tmp_path / "sweeps"
    started = [_start(tmp_path, root / "joblib", "hydra/launcher=joblib_local", "seed=0,1"),
               _start(tmp_path, root / "submitit", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
                      "seed=2,3")]  # both at once: the test stays well inside its time limit
    p1, p2 = (_wait(p) for p in started)
    assert p1.returncode == 0, p1.stderr[-3000:]
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert (root / "submitit" / ".submitit").is_dir()
    col = collect(root)
    assert len(col.frame) == 4 and col.failed.empty
    assert sorted(col.frame["seed"]) == [0, 1, 2, 3]
    assert col.launchers == ["JoblibLauncher", "LocalLauncher"]


def _slurm_reachable() -> str | None:
    """Why a real Slurm run cannot be tried here (None: sbatch is installed and a controller answers)."""
    import shutil

    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "no Slurm here (sbatch / sinfo not installed); docs/scale-out.md says how this was run on one"
    try:
        p = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo did not answer ({type(e).__name__})"
    if p.returncode != 0 or "up" not in p.stdout.split():
        return f"no Slurm partition is up (sinfo: {(p.stderr or p.stdout).strip()[:200]!r})"
    return None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_real_slurm_multirun_with_a_failed_job_is_collected(tmp_path):
    """Our `slurm` launcher config through sbatch on a real Slurm controller (skipped where there is none, as in
    CI): one job array, a task that fails, and collect lists exactly that one, reading its Slurm log, with the
    array's own sbatch-script folder not mistaken for a job."""
    why = _slurm_reachable()
    if why:
        pytest.skip(why)
    sweep = tmp_path / "sweeps" / "slurm"
    p = _multirun(tmp_path, sweep, "hydra/launcher=slurm", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=5",
                  "workload.rate=2,-1")
    assert p.returncode != 0  # the failed task is re-raised by submitit
    col = collect(sweep)
    assert len(col.ok) == 1 and len(col.failed) == 1, col.failed.to_dict("records")
    assert col.ok["workload.rate"].tolist() == [2]
    assert col.failed.iloc[0]["error"].startswith("llmsim: error: workload.rate: expected a value > 0, got -1 (")
    assert col.launchers == ["SlurmLauncher"]
    jobs = [d.name for d in (sweep / ".submitit").iterdir()]
    assert any("_" not in j and j != "%j" for j in jobs)  # the array's script folder was there and was skipped


@pytest.mark.parametrize("module", ["llmsim", "llmsim.agents.train"])
def test_slurm_sweep_without_srun_is_one_line(tmp_path, module):
    """docs/scale-out.md's Slurm command tried on a machine without Slurm: one line naming the launcher and the
    local alternative, exit status 2, not submitit's traceback from inside the launcher."""
    bare = tmp_path / "bin"  # a PATH on which no srun can be found
    bare.mkdir()
    p = subprocess.run([sys.executable, "-m", module, "-m", "hydra/launcher=slurm", "seed=0,1",
                        f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PATH": str(bare), "MPLBACKEND": "Agg"}, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "hydra/launcher=slurm: no srun" in lines[0] and "hydra/launcher=slurm_local" in lines[0]
