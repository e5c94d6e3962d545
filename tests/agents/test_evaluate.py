"""``python -m llmsim.agents.evaluate``: every policy sees the same requests, rows are deterministic and independent of
the number of worker processes, the outputs are written, and a bad checkpoint is one line with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from llmsim.agents.checkpoint import save_checkpoint
from llmsim.agents.checkpoint_meta import action_layout, observation_layout
from llmsim.agents.evaluate import (
    DEFAULT_SEEDS,
    baseline_specs,
    env_config,
    evaluate,
    held_out_seeds,
    run_app,
    workload_digest,
    workload_seed,
)
from llmsim.agents.evaluate_report import markdown, summarise
from llmsim.agents.nets import QNetwork
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError
from llmsim.resources import conf_dir

SMALL = ["env.num_requests=60"]
SEEDS = [1000, 1001]


def _compose(overrides: list[str]) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="evaluate", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _env_cfg(overrides: list[str] | None = None) -> dict[str, Any]:
    return _compose(SMALL + (overrides or []))["env"]


def _without_wall(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def _run_app(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmsim.agents.evaluate", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _checkpoint(path: Path, env_cfg: dict[str, Any]) -> Path:
    """An untrained checkpoint for ``env_cfg``'s layout (plumbing only)."""
    import torch

    env = make_from_config(env_cfg)
    torch.manual_seed(0)
    net = QNetwork(int(env.observation_space.shape[0]), int(env.action_space.n))
    meta = {"agent": "ddqn", "observation": observation_layout(env), "actions": action_layout(env)}
    return save_checkpoint(path, net, meta)


@pytest.mark.slow
def test_app_with_baselines_writes_json_markdown_and_plot(tmp_path):
    run = tmp_path / "run"
    p = _run_app([*SMALL, "seeds=[1000,1001]", "baselines=[round_robin,jsq,earliest_available]", "progress=false",
                  f"hydra.run.dir={run}"], tmp_path)
    assert p.returncode == 0, p.stderr
    body = json.loads((run / "evaluation.json").read_text())
    rows = body["rows"]
    assert [(r["policy"], r["seed"]) for r in rows] == [(pol, s) for pol in ("round_robin", "jsq",
                                                                           "earliest_available") for s in SEEDS]
    for r in rows:
        assert r["num_requests"] == 60 and r["completed"] + r["dropped"] == 60
        for k in ("mean_e2el_ms", "median_e2el_ms", "p90_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "p99_ttft_ms",
                  "mean_tpot_ms", "return", "makespan_s", "router_wait_s", "preempted_frac", "steps", "wall_s"):
            assert isinstance(r[k], int | float), k
        assert "slo_attainment" in r  # null: the workload_router env sets no SLO
    assert body["seeds"] == SEEDS and body["env"]["num_requests"] == 60
    assert [p_["label"] for p_ in body["policies"]] == ["round_robin", "jsq", "earliest_available"]
    assert body["policies"][2]["kwargs"]["kv_tokens"]  # filled in from the env, as experiments.testbeds.calibrate does
    md = (run / "evaluation.md").read_text()
    assert "| policy | episodes | mean E2E (s)" in md and "E2E vs RR" in md
    assert md.strip() in p.stdout
    assert (run / "evaluation.png").stat().st_size > 1000


def test_every_policy_sees_the_same_requests():
    cfg = _env_cfg()
    rows = evaluate(cfg, ["round_robin", "least_work_left", "max_capacity"], SEEDS)
    for s in SEEDS:
        per_seed = [r for r in rows if r["seed"] == s]
        assert len(per_seed) == 3
        assert len({r["workload_digest"] for r in per_seed}) == 1
        assert {r["num_requests"] for r in per_seed} == {60}
    assert rows[0]["workload_digest"] != rows[1]["workload_digest"]  # seeds differ
    # the digest is the workload of that seed: arrival times, lengths and tasks of a fresh env's episode
    envs = [make_from_config(cfg) for _ in range(2)]
    for env in envs:
        env.reset(seed=SEEDS[0], options={"workload_seed": workload_seed(SEEDS[0], 0)})
    assert [r.arrival for r in envs[0].episode_requests] == [r.arrival for r in envs[1].episode_requests]
    assert workload_digest(envs[0]) == rows[0]["workload_digest"]


@pytest.mark.slow
def test_rows_are_deterministic_and_independent_of_jobs(tmp_path):
    cfg = _env_cfg()
    ckpt = _checkpoint(tmp_path / "ckpt", cfg)
    policies = ["round_robin", {"name": "jsq", "label": "jsq_x"}, {"checkpoint": str(ckpt), "label": "learned"}]
    one = evaluate(cfg, policies, SEEDS, jobs=1)
    again = evaluate(cfg, policies, SEEDS, jobs=1)
    two = evaluate(cfg, policies, SEEDS, jobs=2)
    assert [r["policy"] for r in one] == ["round_robin"] * 2 + ["jsq_x"] * 2 + ["learned"] * 2
    assert _without_wall(one) == _without_wall(again)
    assert _without_wall(one) == _without_wall(two)


def test_learned_policies_act_with_one_torch_thread_and_the_caller_s_setting_is_restored():
    """Float sums depend on the thread count (a near tie between two actions can flip), so evaluation pins it to
    one whatever the machine has; a notebook's own setting comes back afterwards."""
    torch = pytest.importorskip("torch")

    class Recorder:
        name = "recorder"
        seen: set[int] = set()

        def reset(self, env: Any, seed: int) -> None:
            pass

        def act(self, obs: Any, mask: Any, env: Any) -> int:
            Recorder.seen.add(torch.get_num_threads())
            return int(mask.nonzero()[0][0])

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        evaluate(_env_cfg(), [Recorder()], SEEDS[:1], jobs=1)
        assert Recorder.seen == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_held_out_task_mix_changes_the_workload():
    base = evaluate(_env_cfg(), ["round_robin"], [1000])[0]
    cfg = _compose(SMALL + ["+env_overrides.task_weights=long_decode"])
    assert cfg["env_overrides"] == {"task_weights": "long_decode"}
    merged = env_config(cfg["env"], cfg["env_overrides"])
    assert merged["task_weights"] == "long_decode" and merged["num_requests"] == 60
    long_mix = evaluate(merged, ["round_robin"], [1000])[0]
    assert long_mix["workload_digest"] != base["workload_digest"]


@pytest.mark.slow
@pytest.mark.parametrize("which", ["missing", "other_layout"])
def test_bad_checkpoint_is_one_line_and_exit_2(tmp_path, which):
    if which == "missing":
        ckpt, needle = tmp_path / "no_such_dir", "no such checkpoint directory"
    else:  # a BestEffort checkpoint evaluated on WorkloadRouter
        ckpt, needle = _checkpoint(tmp_path / "be", _compose(["env=best_effort", "env.num_requests=20"])["env"]), \
            "observation layout"
    run = tmp_path / "run"
    p = _run_app([*SMALL, "seeds=[1000]", f"checkpoints=[{ckpt}]", f"hydra.run.dir={run}"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmsim-evaluate: error: "), p.stderr
    assert needle in lines[0] and str(ckpt) in lines[0]
    assert not (run / "evaluation.json").exists()


def test_api_refuses_bad_inputs_before_running():
    cfg = _env_cfg()
    with pytest.raises(ConfigError, match="used twice"):
        evaluate(cfg, ["jsq", "jsq"], [1000])
    with pytest.raises(ConfigError, match="unknown option"):
        evaluate(cfg, [{"name": "jsq", "kwargs": {"bogus": 1}}], [1000])
    with pytest.raises(ConfigError, match="seeds"):
        evaluate(cfg, ["jsq"], [])
    with pytest.raises(ConfigError, match="jobs"):
        evaluate(cfg, ["jsq"], [1000], jobs=0)
    assert held_out_seeds(3) == [2000, 2001, 2002]  # a count means test seeds (validation: 1000-1999)


def test_auto_baselines_per_env():
    assert [s["label"] for s in baseline_specs("auto", "workload_router")] == [
        "round_robin", "jsq", "least_work_left", "least_kv", "earliest_available", "max_capacity", "min_min"]
    be = baseline_specs("auto", "best_effort")
    assert [s["label"] for s in be][:3] == ["static_opt-125m", "static_opt-1.3b", "static_opt-6.7b"]
    rows = evaluate(_compose(["env=best_effort", "env.num_requests=30"])["env"], be, [1000])
    assert len({r["workload_digest"] for r in rows}) == 1 and len(rows) == 4
    assert baseline_specs("none", "workload_router") == []
    with pytest.raises(ConfigError, match="baselines"):
        baseline_specs("bogus", "workload_router")


def test_summary_gains_and_order():
    rows = [{"policy": "round_robin", "seed": s, "mean_e2el_ms": 1000.0 + s, "makespan_s": 100.0, "return": 1.0}
            for s in (0, 1)]
    rows += [{"policy": "learned", "seed": s, "mean_e2el_ms": 800.0 + s, "makespan_s": 110.0, "return": 2.0}
             for s in (0, 1)]
    summary = summarise(rows)
    assert [e["policy"] for e in summary] == ["learned", "round_robin"]
    learned = summary[0]
    assert learned["e2e_gain_pct"] == pytest.approx((1000.5 - 800.5) / 1000.5 * 100)
    assert learned["makespan_gain_pct"] == pytest.approx(-10.0)
    assert learned["mean_e2el_ms_std"] == pytest.approx(0.7071, abs=1e-4)
    md = markdown(summary, {"env_id": "x", "seeds": [0, 1], "env": {"num_requests": 60}})
    assert "| learned | 2 | 0.80 ± 0.00 |" in md and "+19.99 %" in md


def test_reports_default_to_test_seeds_and_say_which_split():
    assert list(DEFAULT_SEEDS) == _compose([])["seeds"] == [2000, 2001, 2002, 2003, 2004]
    rows = [{"policy": "round_robin", "seed": s, "mean_e2el_ms": 1.0, "timeouts": 3, "cut_off": 1} for s in (5, 2000)]
    md = markdown(summarise(rows), {"env_id": "x", "seeds": [5, 2000], "env": {"num_requests": 60}})
    assert "WARNING" in md and "training seeds" in md  # seed 5 is a training seed: not held out
    assert "| timeouts |" in md and "| cut off |" in md  # placed by the wait fallback; ended by the limit


def test_rows_carry_all_requests_and_completed_only_latencies():
    row = evaluate(_env_cfg(), ["round_robin"], [2000])[0]
    for k in ("mean", "median", "p90", "p99"):
        assert isinstance(row[f"{k}_e2el_ms"], float) and isinstance(row[f"completed_{k}_e2el_ms"], float)
        assert isinstance(row[f"{k}_ttft_ms"], float) and isinstance(row[f"completed_{k}_ttft_ms"], float)
    assert row["cut_off"] == 0 and row["mean_e2el_ms"] == pytest.approx(row["completed_mean_e2el_ms"])


def test_all_baselines_are_the_suite_s_heuristics():
    labels = [s["label"] for s in baseline_specs("all", "workload_router")]
    assert {"dedicated_small_large", "max_capacity", "min_min", "shepherd"} <= set(labels)
    assert [s["label"] for s in baseline_specs("all", "best_effort")][:3] == [
        "static_opt-125m", "static_opt-1.3b", "static_opt-6.7b"]


@pytest.mark.parametrize("override", ["+env_overrides.rate=3.0", "seeds=[2000]", "reference=jsq",
                                      "episodes_per_seed=2"])
def test_suite_refuses_plain_mode_keys_it_would_ignore(tmp_path, override):
    cfg = _compose(["suite=unseen", override])
    with pytest.raises(ConfigError, match=override.split("=")[0].lstrip("+").split(".")[0]):
        run_app(cfg, tmp_path)


def test_preempted_share_is_over_every_request_of_the_episode():
    from llmsim.agents.episodes import preempted_share

    summary = {"preempted_requests": 5, "completed": 2}  # three of the five preempted were dropped later
    assert preempted_share(summary, 10) == 0.5
    assert preempted_share(summary, 0) is None


def test_one_episode_has_no_spread():
    """A sample std of one episode is undefined: null in the summary and no "± 0.00" in the table."""
    rows = [{"policy": "round_robin", "seed": 0, "mean_e2el_ms": 1000.0, "makespan_s": 100.0, "return": 1.0}]
    [e] = summarise(rows)
    assert e["mean_e2el_ms_mean"] == 1000.0 and e["mean_e2el_ms_std"] is None
    md = markdown([e], {"env_id": "x", "seeds": [0], "env": {"num_requests": 60}})
    assert "| round_robin | 1 | 1.00 |" in md and "±" not in md.split("\n\n")[1]


def test_a_baseline_s_bad_router_option_is_told_under_its_own_key(tmp_path):
    """A router's own message says ``policy.kwargs`` (the llmsim CLI's key): here it is the baseline typed."""
    cfg = {"env": _env_cfg(), "baselines": ["round_robin", {"name": "jsq", "kwargs": {"nope": 1}}],
           "seeds": [2000], "progress": False, "plots": False}
    with pytest.raises(ConfigError) as e:
        run_app(cfg, tmp_path / "out", quiet=True)
    assert str(e.value) == "baselines[1].kwargs: routing policy 'jsq' got unknown option(s) ['nope']"
    with pytest.raises(ConfigError) as e:
        run_app({**cfg, "baselines": [{"name": "onnx"}]}, tmp_path / "out", quiet=True)
    assert str(e.value).startswith("baselines[0].kwargs.path: the onnx router needs an export directory")
