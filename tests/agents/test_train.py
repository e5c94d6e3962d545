"""llmsim-train: outputs, checkpoints (save / load / resume / refuse), determinism, config composition."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from llmsim.agents.checkpoint import CheckpointPolicy  # noqa: E402
from llmsim.agents.checkpoint_meta import read_meta  # noqa: E402
from llmsim.agents.env_setup import env_config, make_env  # noqa: E402
from llmsim.agents.scoring import eval_score, evaluate_greedy  # noqa: E402
from llmsim.agents.train import agent_config, check_setup, make_logger, train  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.resources import conf_dir  # noqa: E402
from llmsim.state.cluster_state import LAYOUT_VERSION  # noqa: E402
from tests.helpers import REPO as ROOT  # noqa: E402

SMALL_ENV = {"id": "workload_router", "num_requests": 40, "rate": 20.0,
             "reward": {"kind": "workload_aware", "guidance": 0.0}}
SMALL_AGENT = {"name": "ddqn", "hidden": [32, 32], "batch_size": 64, "learning_starts": 200, "buffer_size": 5000,
               "train_freq": 4, "target_update": 200, "eps_fraction": 0.5}
OVERRIDES = ["env=workload_router", "env.num_requests=40", "env.reward.guidance=0", "agent.hidden=[32,32]",
             "agent.batch_size=64", "agent.learning_starts=200", "agent.buffer_size=5000", "agent.train_freq=4",
             "agent.target_update=200", "agent.eps_fraction=0.5", "trainer.eval_every=400", "trainer.eval_seeds=[500]",
             "trainer.progress=false"]


def _cfg(total: int = 800, **trainer) -> dict:
    tr = {"total_steps": total, "num_envs": 1, "eval_every": 400, "eval_seeds": [500], "eval_metric": "return",
          "resume": None, "init_from": None, "save_replay": False, "progress": False, "torch_threads": 1}
    tr.update(trainer)
    return {"env": dict(SMALL_ENV), "agent": dict(SMALL_AGENT), "seed": 0, "predictor": None, "trainer": tr,
            "label": None}


def _weights(d: Path) -> dict:
    return torch.load(d / "q_net.pt", weights_only=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("train")
    meta = train(_cfg(save_replay=True), run)
    return run, meta


def test_run_directory_and_checkpoint(trained):
    run, meta = trained
    for f in ("best/checkpoint.json", "best/q_net.pt", "last/trainer.pt", "last/config.yaml", "last/replay.npz",
              "progress.csv", "training.json"):
        assert (run / f).is_file(), f
    assert list((run / "tensorboard").glob("**/events.out.tfevents.*"))
    m = read_meta(run / "last")
    assert m["steps"] >= 800 and m["episodes"] >= 1
    assert m["observation"] == {"kind": "flat", "shape": [27], "state_layout_version": LAYOUT_VERSION}
    assert m["actions"]["n"] == 6 and m["actions"]["wait"] == 4
    assert [e["step"] for e in meta["evaluations"]] == sorted(e["step"] for e in meta["evaluations"])


def test_loaded_checkpoint_reproduces_its_evaluation(trained):
    run, meta = trained
    env = make_env(SMALL_ENV)
    res = evaluate_greedy(CheckpointPolicy(run / "last"), env, [500], "return")
    assert res["return"] == pytest.approx(meta["evaluations"][-1]["return"])


def test_resume_continues_counters_and_history(trained, tmp_path):
    run, meta = trained
    meta2 = train(_cfg(total=1200, resume=str(run / "last")), tmp_path)
    assert meta2["steps"] >= 1200 and meta2["episodes"] >= meta["episodes"]
    steps = [e["step"] for e in meta2["evaluations"]]
    assert steps[: len(meta["evaluations"])] == [e["step"] for e in meta["evaluations"]]
    assert steps[-1] >= 1200


def test_resume_into_a_new_directory_keeps_best_and_last(trained, tmp_path):
    """Resuming into a new run directory (Hydra's default) whose evaluations beat nothing still leaves the best/
    and last/ the final line points at: best/ is the resumed run's, copied."""
    run, meta = trained
    src = tmp_path / "src"
    shutil.copytree(run, src)
    (src / "best" / "export").mkdir()  # an earlier llmsim-export of best/: not carried, it would go stale
    new = tmp_path / "new"
    meta2 = train(_cfg(total=800, resume=str(src / "last")), new)
    assert meta2["best_score"] == meta["best_score"]
    assert read_meta(new / "best")["best_score"] == meta["best_score"]
    assert _weights(new / "best").keys() == _weights(run / "best").keys()
    for k, v in _weights(run / "best").items():
        assert torch.equal(_weights(new / "best")[k], v)
    assert (new / "last" / "checkpoint.json").is_file() and not (new / "best" / "export").exists()


def test_resume_without_best_beside_it_warns_and_rebuilds_best(trained, tmp_path, capsys):
    run, _ = trained
    lone = tmp_path / "copied" / "last"
    shutil.copytree(run / "last", lone)
    meta2 = train(_cfg(total=1200, resume=str(lone)), tmp_path / "run")
    assert "trainer.resume" in capsys.readouterr().err and "no best/ beside" in meta2["warnings"][0]["message"]
    assert (tmp_path / "run" / "best" / "checkpoint.json").is_file()


def test_resume_with_other_settings_names_them(trained, tmp_path, capsys):
    """A resume is composed from its own command line, not from the checkpoint: overrides of the first run that
    are not repeated change the env or the agent mid-run, so the warning names each changed key; the trainer's
    own keys (the budget, the resume itself) may change freely."""
    run, _ = trained
    cfg = _cfg(total=1200, resume=str(run / "last"))
    cfg["env"]["num_requests"] = 60
    cfg["agent"]["learning_starts"] = 300
    meta2 = train(cfg, tmp_path / "run")
    drift = [w["message"] for w in meta2["warnings"] if "config.yaml" in w["message"]]
    assert len(drift) == 1, meta2["warnings"]
    assert "env.num_requests (40 -> 60)" in drift[0] and "agent.learning_starts (200 -> 300)" in drift[0]
    assert "trainer." not in drift[0].split("config.yaml", 1)[1]
    assert "env.num_requests (40 -> 60)" in capsys.readouterr().err
    same = train(_cfg(total=1200, resume=str(run / "last")), tmp_path / "same")
    assert not [w for w in same["warnings"] if "config.yaml" in w["message"]]


def test_checkpoint_refused_for_another_layout(trained):
    run, _ = trained
    pol = CheckpointPolicy(run / "best")
    env8 = make_env({**SMALL_ENV, "num_instances": 8})
    with pytest.raises(ConfigError, match=r"shape \[27\].*shape \[51\]"):
        pol.reset(env8, 0)
    with pytest.raises(ConfigError, match="trainer.resume"):
        train({**_cfg(), "env": {**SMALL_ENV, "num_instances": 8}} | {"trainer": {**_cfg()["trainer"],
                                                                               "resume": str(run / "last")}},
              run / "other")


def test_init_from_with_another_network_refused(trained, tmp_path):
    run, _ = trained
    cfg = _cfg(init_from=str(run / "best"))
    cfg["agent"]["hidden"] = [16]
    with pytest.raises(ConfigError, match="network"):
        train(cfg, tmp_path)


def test_setup_errors(tmp_path):
    cfg = _cfg()
    cfg["agent"]["guidance"] = "guided"
    cfg["env"]["reward"] = {"kind": "workload_aware", "guidance": 1.0}
    with pytest.raises(ConfigError, match="counted twice"):
        train(cfg, tmp_path)
    cfg = _cfg()
    cfg["agent"]["guidance"] = "aware"
    cfg["env"] = {"id": "workload_router", "num_requests": 40, "reward": "latency"}
    with pytest.raises(ConfigError, match="no heuristic"):
        train(cfg, tmp_path)
    cfg = _cfg()
    cfg["agent"]["lr_typo"] = 1
    with pytest.raises(ConfigError, match="lr_typo"):
        train(cfg, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_cli_is_deterministic_across_processes(tmp_path, trained):
    """The same config and seed give bit-identical weights, in-process and in a fresh process."""
    run, _ = trained
    ref = _cfg(save_replay=True)
    out = tmp_path / "cli"
    p = subprocess.run([sys.executable, "-m", "llmsim.agents.train", *OVERRIDES, "trainer.total_steps=800",
                        f"hydra.run.dir={out}"], cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "trained ddqn" in p.stdout
    a, b = _weights(run / "last"), _weights(out / "last")
    assert ref["seed"] == 0 and a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_cli_bad_resume_is_one_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "llmsim.agents.train", *OVERRIDES, f"trainer.resume={tmp_path}/nothing",
                        f"hydra.run.dir={tmp_path}/run"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "not a checkpoint directory" in lines[0], p.stderr


def _presets(group: str) -> list[str]:
    return sorted(f.stem for f in (conf_dir() / group).glob("*.yaml"))


@pytest.mark.parametrize("agent", _presets("agent"))
@pytest.mark.parametrize("env", _presets("env"))
def test_every_agent_env_config_composes(agent, env):
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"agent={agent}", f"env={env}"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    agent_config(plain["agent"])
    assert plain["env"]["id"] in {"workload_router", "qos_edge", "best_effort", "routing"}


@pytest.mark.parametrize("experiment", _presets("experiment"))
def test_every_experiment_composes_and_builds(experiment, tmp_path):
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"+experiment={experiment}"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain["env"] = {**plain["env"], "num_requests": 20}
    if isinstance(plain.get("predictor"), dict) and "samples" in plain["predictor"]:
        plain["predictor"]["samples"] = 500  # a learned predictor is fitted here: keep it small
    check_setup(agent_config(plain["agent"]), make_env(env_config(plain["env"], plain.get("predictor"), tmp_path)))
    json.dumps(plain)
    assert np.isfinite(plain["trainer"]["total_steps"])


def test_learned_predictor_is_fitted_once_and_saved(tmp_path):
    pytest.importorskip("xgboost")
    cfg = _cfg(total=300)
    cfg["predictor"] = {"kind": "learned", "samples": 2000, "seed": 0}
    meta = train(cfg, tmp_path)
    assert (tmp_path / "predictor.json").is_file()
    assert meta["env"]["predictor"] == {"kind": "learned", "path": str(tmp_path / "predictor.json")}
    env = make_env(meta["env"])
    assert type(env.predictor).__name__ == "LearnedPredictor"


def test_eval_score_ranks_lost_requests_first():
    fast_but_lossy = eval_score("mean_e2el_ms", 50_000.0, 3)
    slow_complete = eval_score("mean_e2el_ms", 400_000.0, 0)
    assert slow_complete > fast_but_lossy
    assert eval_score("mean_e2el_ms", 80_000.0, 0) > eval_score("mean_e2el_ms", 90_000.0, 0)
    assert eval_score("return", -5.0, 10) == -5.0  # the return already charges drops


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_parallel_collection_in_worker_processes(tmp_path):
    meta = train(_cfg(total=400, num_envs=2, eval_every=0), tmp_path)
    assert meta["steps"] >= 400 and meta["evaluations"]
    assert read_meta(tmp_path / "last")["steps"] == meta["steps"]


def test_progress_csv_columns_do_not_depend_on_string_hashing(tmp_path: Path) -> None:
    """stable-baselines3 adds new columns as a set difference (hash order); ours are sorted, so the same run writes
    the same progress.csv in every process."""
    logger = make_logger(tmp_path)
    first = [f"rollout/k{i:02d}" for i in range(20, 0, -1)]
    for k in first:
        logger.record(k, 1.0)
    logger.dump(1)
    later = [f"eval/z{i:02d}" for i in range(12, 0, -1)]
    for k in later:
        logger.record(k, 2.0)
    logger.dump(2)
    logger.close()
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert header == sorted(first) + sorted(later)
