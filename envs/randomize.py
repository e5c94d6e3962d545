"""Domain randomisation over workloads and cluster sizes, and the fixed-width action slots that make it trainable.

A policy that must run on traffic and clusters it never saw is trained on many: each episode of a
:class:`SlotEnv` draws a scenario (cluster size, arrival rate, task mix, GPU) and builds a fresh testbed env for
it (a WorkloadRouter env builds in a few milliseconds). A curriculum starts at the paper's regime (``start``:
four instances at the paper's rate per instance, Table 1's mix) and widens the ranges linearly until episode
``curriculum_episodes``.

Clusters of different sizes have different action spaces (``Discrete(K + 2)``), which one replay and one network
cannot mix. A SlotEnv therefore acts in *slots*: ``Discrete(n_max + 2)``, slot ``k < K`` is instance ``k``, slots
``K .. n_max - 1`` are absent instances (never valid), slot ``n_max`` is wait and ``n_max + 1`` drop. The
observation must be padded to ``n_max`` instances: the :class:`~llmsim.envs.observations.instance_set.InstanceSetObs`
or the QoSEdge graph state with ``max_experts`` (:class:`~llmsim.envs.observations.graph.GraphObs`), so
observation and action shapes are the same for every scenario. :func:`~llmsim.envs.actions.slot_mask` and
:func:`~llmsim.envs.actions.env_action` translate between an env's actions and slots; a slot policy runs on a plain
env through them (llmsim.agents.checkpoint) and, exported, on any number of backends (llmsim.envs.policy_router).

Validation runs a SlotEnv on a fixed list of ``scenarios`` instead: the scenario of an episode is
``scenarios[workload_seed % len(scenarios)]``, so consecutive evaluation seeds cover every scenario.

A predictor object in ``base`` (e.g. a learned one, which the env does not fit: built once by
``llmsim.envs.predictors.from_config.make_agent_predictor``) is shared by every episode's env, not copied per episode,
so it is fitted or loaded once and keeps its warm caches.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pydantic import Field

from llmsim.envs.actions import check_action, env_action, slot_action, slot_mask
from llmsim.envs.predictors.base import Predictor
from llmsim.envs.routing_env import RoutingEnv, reset_workload_seed
from llmsim.envs.tasks import WORKLOAD_ROUTER_MIXES, WORKLOAD_ROUTER_TASKS
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError
from llmsim.schema import PosFloat, PosInt, Schema

RANDOM_MIX = "random"  # a task mix with Dirichlet(1) weights, drawn per episode


class RandomizeConfig(Schema):
    """``randomize`` (conf/experiment/workload_router_transfer.yaml): the ranges an episode's scenario is drawn from."""

    where: ClassVar[str] = "randomize"
    sizes: list[PosInt] = Field(default_factory=lambda: [2, 8], min_length=2, max_length=2)  # instances, inclusive
    size_option: str = "num_instances"  # the env option the size sets (QoSEdge: experts)
    rate_per_instance: PosFloat = 5.0  # req/s per instance at scale 1 (the paper: 20 req/s on 4 instances)
    rate_scale: list[PosFloat] = Field(default_factory=lambda: [0.25, 2.0], min_length=2, max_length=2)
    # WorkloadRouter task mixes (task_weights); [] draws none (a testbed without task mixes, e.g. QoSEdge)
    mixes: list[str] = Field(default_factory=lambda: ["table1", "long_decode", "short_decode", RANDOM_MIX])
    gpus: list[str] = Field(default_factory=lambda: ["v100-16gb"], min_length=1)
    # the share of episodes (once the curriculum is open) whose instances each draw their GPU from ``gpus``: a
    # heterogeneous cluster; the others run one GPU drawn from ``gpus`` on every instance
    hetero_share: float = Field(default=0.0, ge=0.0, le=1.0)
    curriculum_episodes: int = Field(default=30, ge=0)  # episodes until the ranges are fully open
    start_size: PosInt = 4
    start_mix: str = "table1"
    num_requests: PosInt | None = None  # per episode (None: the env's)
    # per instance instead (an episode of K instances has K x this): a large cluster's episode then lasts as long
    # as a small one's at the same load per instance, so it reaches the same backlog instead of ending in its
    # first seconds
    requests_per_instance: PosInt | None = None

    def model_post_init(self, _: Any) -> None:
        lo, hi = self.sizes
        if not lo <= self.start_size <= hi:
            raise ConfigError(f"randomize.start_size: {self.start_size} is outside sizes {self.sizes}")
        if not self.rate_scale[0] <= 1.0 <= self.rate_scale[1]:
            raise ConfigError(f"randomize.rate_scale: expected [low <= 1, high >= 1], got {self.rate_scale}")
        if self.num_requests is not None and self.requests_per_instance is not None:
            raise ConfigError("randomize: give num_requests or requests_per_instance, not both")
        for m in [*self.mixes, self.start_mix]:
            if m != RANDOM_MIX and m not in WORKLOAD_ROUTER_MIXES:
                raise ConfigError(f"randomize.mixes: unknown mix {m!r}; expected {RANDOM_MIX!r} or one of "
                                  f"{sorted(WORKLOAD_ROUTER_MIXES)}")


def draw_scenario(cfg: RandomizeConfig, rng: np.random.Generator, episode: int) -> dict[str, Any]:
    """One episode's scenario: env options (num_instances, rate, task_weights, gpu: one name, or one per instance)
    on the curriculum's ranges."""
    p = 1.0 if cfg.curriculum_episodes == 0 else min(1.0, episode / cfg.curriculum_episodes)
    lo, hi = cfg.sizes
    size_lo = round(cfg.start_size - p * (cfg.start_size - lo))
    size_hi = round(cfg.start_size + p * (hi - cfg.start_size))
    size = int(rng.integers(size_lo, size_hi + 1))
    log_lo, log_hi = p * math.log(cfg.rate_scale[0]), p * math.log(cfg.rate_scale[1])
    scale = math.exp(rng.uniform(log_lo, log_hi)) if log_hi > log_lo else 1.0
    out: dict[str, Any] = {cfg.size_option: size, "rate": round(cfg.rate_per_instance * size * scale, 4)}
    if cfg.mixes:
        out["task_weights"] = draw_mix(cfg, rng, p)
    if cfg.hetero_share > 0.0 and rng.random() < p * cfg.hetero_share:
        out["gpu"] = [cfg.gpus[int(i)] for i in rng.integers(len(cfg.gpus), size=size)]
    else:
        out["gpu"] = cfg.gpus[int(rng.integers(len(cfg.gpus)))]
    if cfg.num_requests is not None:
        out["num_requests"] = cfg.num_requests
    if cfg.requests_per_instance is not None:
        out["num_requests"] = cfg.requests_per_instance * size
    return out


def draw_mix(cfg: RandomizeConfig, rng: np.random.Generator, p: float) -> Any:
    """An episode's task mix: a mix name, or Dirichlet(1) weights for ``random``."""
    mix = cfg.mixes[int(rng.integers(len(cfg.mixes)))] if rng.random() < p else cfg.start_mix
    if mix != RANDOM_MIX:
        return mix
    names = [t[0] for t in WORKLOAD_ROUTER_TASKS]
    return dict(zip(names, (float(w) for w in rng.dirichlet(np.ones(len(names))))))


def slot_count(builder: Any) -> int:
    """The instance slots of a padded observation builder (``n_max``, or the graph's ``max_experts``); 0 if none."""
    if builder.name == "instance_set":
        return int(builder.n_max)
    if builder.name == "graph" and builder.max_experts is not None:
        return int(builder.max_experts)
    return 0


class SlotEnv(gym.Env):
    """Episodes on drawn (``randomize``) or listed (``scenarios``) variants of one base env, in slot actions.

    ``base``: a conf/env mapping (its observation must be padded, see above); each scenario's options go on top.
    Its ``predictor`` may be a Predictor object: every episode's env then uses that one object.
    The attributes agents read (``reward_fn``, ``obs_builder``, ``pending``, ``summary()``, ...) are the current
    episode's env's."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, base: Mapping[str, Any], randomize: RandomizeConfig | Mapping[str, Any] | None = None,
                 scenarios: list[Mapping[str, Any]] | None = None) -> None:
        super().__init__()
        if (randomize is None) == (scenarios is None):
            raise ConfigError("SlotEnv: give either randomize (training) or scenarios (validation)")
        base = dict(base)
        self.predictor = base.pop("predictor") if isinstance(base.get("predictor"), Predictor) else None
        self.base = copy.deepcopy(base)
        self.randomize = None if randomize is None else RandomizeConfig.parse(randomize)
        self.scenarios = [dict(s) for s in scenarios or []]
        if scenarios is not None and not self.scenarios:
            raise ConfigError("scenarios: expected at least one scenario")
        self.episodes = 0
        self.scenario: dict[str, Any] = self.scenarios[0] if self.scenarios else {}
        self.env = self.build(self.scenario)
        builder = self.env.obs_builder
        self.n_max = slot_count(builder)
        if not self.n_max:
            raise ConfigError(f"env.observation: slot actions need a padded observation ('instance_set', or 'graph' "
                              f"with max_experts), got {builder.name!r}")
        if not self.env.action_kind.startswith("instance"):
            raise ConfigError(f"env.action: slot actions choose instances, got {self.env.action_kind!r}")
        self.observation_space = self.env.observation_space
        self.action_space = gym.spaces.Discrete(self.n_max + 2)

    def build(self, scenario: Mapping[str, Any]) -> RoutingEnv:
        shared = {} if self.predictor is None else {"predictor": self.predictor}
        return make_from_config({**copy.deepcopy(self.base), **shared, **copy.deepcopy(dict(scenario))})

    # ------------------------------------------------------------------ episodes
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        reset_workload_seed(options, None)  # checked before a scenario is picked by it
        opts = dict(options or {})
        if self.randomize is not None:
            self.scenario = draw_scenario(self.randomize, self.np_random, self.episodes)
        else:
            key = opts.get("workload_seed", seed if seed is not None else self.episodes)
            self.scenario = self.scenarios[int(key) % len(self.scenarios)]
        self.episodes += 1
        self.env = self.build(self.scenario)
        inner_seed = int(self.np_random.integers(2**31 - 1)) if seed is None else seed
        obs, info = self.env.reset(seed=inner_seed, options=opts or None)
        return obs, self.slot_info(info)

    def step(self, action: int):
        slot = check_action(action, int(self.action_space.n))  # a slot, not the current env's action
        obs, r, term, trunc, info = self.env.step(env_action(slot, self.env.n_choices, self.n_max))
        return obs, r, term, trunc, self.slot_info(info)

    def slot_info(self, info: dict[str, Any]) -> dict[str, Any]:
        info["action_mask"] = slot_mask(info["action_mask"], self.n_max)
        info["scenario"] = copy.deepcopy(self.scenario)  # a fresh copy each step: the caller keeps what it is given
        return info

    def action_masks(self) -> np.ndarray:
        return slot_mask(self.env.action_masks(), self.n_max)

    def heuristic_action(self, router: Any) -> int:
        return slot_action(self.env.heuristic_action(router), self.env.n_choices, self.n_max)

    # ------------------------------------------------------------------ what agents read of an env
    @property
    def n_choices(self) -> int:
        return self.n_max

    @property
    def wait_action(self) -> int:
        return self.n_max

    @property
    def drop_action(self) -> int:
        return self.n_max + 1

    @property
    def action_kind(self) -> str:
        return self.env.action_kind

    @property
    def offer_wait(self) -> bool:
        return self.env.offer_wait

    @property
    def reward_fn(self) -> Any:
        return self.env.reward_fn

    @property
    def reward_scale(self) -> float:
        return self.env.reward_scale

    @property
    def obs_builder(self) -> Any:
        return self.env.obs_builder

    @property
    def pending(self) -> Any:
        return self.env.pending

    @property
    def terminated(self) -> bool:
        return self.env.terminated

    @property
    def truncated(self) -> bool:
        return self.env.truncated

    @property
    def timeouts(self) -> int:
        return self.env.timeouts

    @property
    def num_decisions(self) -> int:
        return self.env.num_decisions

    @property
    def episode_requests(self) -> Any:
        return self.env.episode_requests

    @property
    def instance_models(self) -> list[str]:
        return self.env.instance_models

    def summary(self) -> dict[str, Any]:
        return self.env.summary()
