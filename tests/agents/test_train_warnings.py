"""Training that tells the truth, for every algorithm and preset: a budget below learning_starts, a best/ from
before the first gradient step and a collapsed policy (one action, waiting, dropping) are warning lines at the
evaluation where they happen and entries of training.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from llmsim.agents.env_setup import make_env  # noqa: E402
from llmsim.agents.policy import HeuristicPolicy, run_episode  # noqa: E402
from llmsim.agents.train import train  # noqa: E402
from llmsim.agents.training_warnings import (  # noqa: E402
    MOST_FREQUENT_LIMIT,
    ActionCounts,
    WatchedGreedy,
    collapse_warnings,
    guide_only_warning,
)
from llmsim.resources import conf_dir  # noqa: E402

PRESETS = {  # every algorithm and preset: DDQN flat, guided DDQN, SAC (flat and HAN), SAC argmax
    "ddqn": ["+experiment=intelligent_router_baseline"],
    "ddqn_guided": ["+experiment=intelligent_router_guided"],
    "sac_mlp": ["+experiment=qos_edge_baseline_rl"],
    "sac_han": ["+experiment=qos_edge_sac_han"],
    "sac_argmax": ["agent=sac_argmax_han", "env=qos_edge"],
}
TINY = ["env.num_requests=20", "trainer.total_steps=60", "trainer.eval_every=30", "trainer.eval_seeds=[500]",
        "trainer.progress=false", "trainer.num_envs=1", "agent.learning_starts=1000", "agent.batch_size=32",
        "agent.buffer_size=500"]


def _compose(overrides: list[str]) -> dict:
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_budget_below_learning_starts_is_said_at_the_start_and_at_each_untrained_best(preset, tmp_path: Path,
                                                                                        capsys) -> None:
    meta = train(_compose([*PRESETS[preset], *TINY]), tmp_path)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("llmsim-train: warning: ")]
    assert "trainer.total_steps=60 is below agent.learning_starts=1000" in lines[0]
    assert any("step 30: best/ saved at step 30 before the first gradient step" in ln for ln in lines), err
    assert meta["updates"] == 0 and meta["best_untrained"] is True
    recorded = json.loads((tmp_path / "training.json").read_text())["warnings"]
    assert len(recorded) == len(lines) and all(ln.endswith(w["message"]) for w, ln in zip(recorded, lines))
    assert recorded[0]["step"] == 0 and recorded[1]["step"] == 30
    first_eval = meta["evaluations"][0]
    assert first_eval["step"] == 30 and any("before the first gradient step" in w for w in first_eval["warnings"])
    assert {"most_frequent_action_share", "wait_share", "drop_share"} <= set(first_eval)


class _Constant:
    """A policy that always takes the first valid routing choice (or a fixed special action)."""

    name = "constant"

    def __init__(self, special: str | None = None) -> None:
        self.special = special

    def reset(self, env, seed: int) -> None:
        return None

    def act(self, obs, mask: np.ndarray, env) -> int:
        if self.special and env.pending is not None:
            return int(getattr(env, self.special))
        return int(np.flatnonzero(mask)[0]) if mask.any() else 0


def _watch(policy, **env_opts) -> dict[str, float]:
    env = make_env({"id": "workload_router", "num_requests": 40, "rate": 20.0, **env_opts})
    watched = WatchedGreedy(policy)
    run_episode(watched, env, seed=3, workload_seed=3)
    return watched.counts.shares()


def test_a_policy_that_routes_is_not_called_collapsed() -> None:
    shares = _watch(HeuristicPolicy("round_robin"))
    assert shares["decisions_with_choice"] >= 20
    assert collapse_warnings(shares) == []


def test_one_action_waiting_and_dropping_are_each_caught() -> None:
    one = _watch(_Constant())
    assert one["most_frequent_action_share"] >= MOST_FREQUENT_LIMIT
    assert any("collapsed to one action" in w for w in collapse_warnings(one))
    waits = collapse_warnings({"most_frequent_action_share": 0.3, "decisions_with_choice": 10.0, "wait_share": 0.6,
                               "drop_share": 0.0})
    assert waits == ["the greedy policy waits at 60% of its decisions (collapsed to waiting)"]
    drops = collapse_warnings({"most_frequent_action_share": 0.3, "decisions_with_choice": 10.0, "wait_share": 0.0,
                               "drop_share": 0.5})
    assert len(drops) == 1 and "collapsed to dropping" in drops[0]


def _margin_row(margin: float, gain: float, worst: float, p99: float) -> dict[str, float]:
    return {"margin": margin, "gain_pct": gain, "worst_gain_pct": worst, "p99_gain_pct": p99}


def test_a_margin_that_routes_as_the_guide_everywhere_is_said() -> None:
    table = [_margin_row(0.0, -38.2, -62.6, -13.3), _margin_row(0.3, -0.02, -0.2, 0.0),
             _margin_row(1000.0, 0.0, 0.0, 0.0)]
    note = guide_only_warning(table[-1], table)
    assert note is not None and "margin chosen on validation (1000)" in note
    assert "margin 0: -38.2 % mean E2E against the guide, worst scenario -62.6 %" in note
    assert "the checkpoint is the guide heuristic" in note
    # any difference from the guide on validation, on the mean, the worst scenario or the p99, is a learned router
    for row in (_margin_row(0.1, 1.5, 0.0, 0.0), _margin_row(0.1, 0.0, -0.4, 0.0), _margin_row(0.1, 0.0, 0.0, 2.0)):
        assert guide_only_warning(row, [table[0], row]) is None


def test_the_watch_counts_waits_and_drops_apart_and_only_choices_for_one_action() -> None:
    c = ActionCounts()
    assert c.shares()["most_frequent_action_share"] == 0.0
    assert collapse_warnings(c.shares()) == []  # nothing decided: nothing to say
    env = make_env({"id": "workload_router", "num_requests": 40, "rate": 20.0})
    watched = WatchedGreedy(_Constant("wait_action"))
    env.reset(seed=1, options={"workload_seed": 1})
    watched.reset(env, 1)
    mask = env.action_masks()
    while env.pending is None:  # to the first decision with a request pending
        env.step(watched.act(None, mask, env))
        mask = env.action_masks()
    watched.act(None, mask, env)
    assert watched.counts.waits == 1 and watched.counts.drops == 0 and watched.counts.decisions == 1
    watched.policy = _Constant("drop_action")
    watched.act(None, mask, env)
    assert watched.counts.drops == 1 and watched.counts.shares()["drop_share"] == 0.5
