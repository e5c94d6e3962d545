"""Every shipped config in conf/ composes through Hydra, passes the schema and runs a short simulation or episode."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from llmsim.cli import run_from_config
from llmsim.resources import conf_dir
from tests.conftest import REPO, SHARED

CONF = REPO / "conf"
TRACE_WORKLOADS = {"azure_code", "azure_conv", "mooncake"}


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _compose(overrides: list[str]) -> dict:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def _small(cfg: dict) -> dict:
    wl = cfg["workload"]
    if wl["kind"] == "synthetic":
        wl["num_requests"] = 40
    else:
        wl["max_requests"] = 40
    cfg["output"] = {"save": False, "plots": False, "progress": False, "format": "csv"}
    cfg["sim"]["on_unservable"] = "drop"  # traces hold a few prompts longer than some contexts (counted)
    return cfg


CASES = ([("cluster", o) for o in _options("cluster")] + [("engine", o) for o in _options("engine")]
         + [("workload", o) for o in _options("workload")] + [("policy", o) for o in _options("policy")])


@pytest.mark.parametrize("group,option", CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_shipped_config_runs(group: str, option: str) -> None:
    if group == "workload" and option in TRACE_WORKLOADS and not SHARED.is_dir():
        pytest.skip(f"trace workload {option} reads ../shared/traces, absent here")
    cfg = _small(_compose([f"{group}={option}"]))
    res = run_from_config(cfg)
    s = res.summary
    assert s["completed"] + s["dropped"] == 40
    assert s["completed"] > 0


@pytest.mark.parametrize("name", _options("env"))
def test_shipped_env_config_steps(name: str) -> None:
    from envs.testbeds import make_from_config

    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "env" / f"{name}.yaml"), resolve=True)
    cfg["num_requests"] = 30
    if isinstance(cfg.get("workload"), dict) and "num_requests" in cfg["workload"]:
        cfg["workload"]["num_requests"] = 30
    env = make_from_config(cfg)
    obs, info = env.reset(seed=0)
    done = False
    steps = 0
    while not done:
        a = int(env.unwrapped.action_masks().argmax())
        obs, r, term, trunc, info = env.step(a)
        done = term or trunc
        steps += 1
    assert steps >= 1
    s = info["summary"]
    assert s["completed"] + s["dropped"] == 30


@pytest.mark.parametrize("name", _options("reward"))
def test_shipped_reward_configs_build(name: str) -> None:
    from envs.rewards import Reward, make_reward

    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "reward" / f"{name}.yaml"), resolve=True)
    assert isinstance(make_reward(cfg), Reward)
