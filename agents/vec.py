"""The training envs (:func:`make_vec`), each wrapped to remember its episode in progress for an exact resume
(agents/resume.py), and the single-process vector env: stable-baselines3's ``DummyVecEnv`` without its per-step
copy.

``DummyVecEnv.step_wait`` returns ``deepcopy(self.buf_infos)``, because a gym env may hand back the same info
dict every step. llmsim's envs build a fresh dict (and a fresh action-mask array) on every step
(``llmsim.envs.routing_env.RoutingEnv``), so a shallow copy of the list is enough, and the deep copy was ~8 % of a
DDQN training step on the Intelligent Router's testbed (``python -m experiments.bench train``). Everything else is
stable-baselines3's code path, but for the observation buffer: ``_obs_from_buf`` deep-copies the dict of
arrays (Python's generic deepcopy, ~20 us a step), where copying each array gives the same fresh arrays.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn
from stable_baselines3.common.vec_env.util import dict_to_obs

from llmsim.agents.env_setup import make_env, make_slot_env
from llmsim.agents.resume import EpisodeRecorder
from llmsim.envs.randomize import RandomizeConfig


class FreshInfoVecEnv(DummyVecEnv):
    """``DummyVecEnv`` for envs whose info dicts are new every step (see module doc)."""

    def step_wait(self) -> VecEnvStepReturn:
        for i in range(self.num_envs):
            obs, self.buf_rews[i], terminated, truncated, self.buf_infos[i] = self.envs[i].step(self.actions[i])
            self.buf_dones[i] = terminated or truncated
            self.buf_infos[i]["TimeLimit.truncated"] = truncated and not terminated  # as DummyVecEnv does
            if self.buf_dones[i]:
                self.buf_infos[i]["terminal_observation"] = obs
                obs, self.reset_infos[i] = self.envs[i].reset()
            self._save_obs(i, obs)
        return self.observations(), np.copy(self.buf_rews), np.copy(self.buf_dones), list(self.buf_infos)

    def observations(self) -> VecEnvObs:
        """A copy of the observation buffer, as ``_obs_from_buf`` returns it, one array copy per key."""
        if self.keys == [None]:  # a Box space: dict_to_obs returns the one array
            return np.copy(self.buf_obs[None])
        return dict_to_obs(self.observation_space, OrderedDict((k, np.copy(v)) for k, v in self.buf_obs.items()))


def recorded(make: Any, *args: Any) -> EpisodeRecorder:
    """A training env that remembers its episode in progress for a checkpoint (agents/resume.py)."""
    return EpisodeRecorder(make(*args))


def make_vec(env_cfg: dict[str, Any], n: int, randomize: RandomizeConfig | None = None) -> VecEnv:
    """``n`` training envs: in worker processes (n > 1), or in this one without SB3's per-step copy; with
    ``randomize``, slot envs drawing a scenario per episode."""
    if randomize is not None:
        fns = [functools.partial(recorded, make_slot_env, env_cfg, randomize) for _ in range(n)]
    else:
        fns = [functools.partial(recorded, make_env, env_cfg) for _ in range(n)]
    return SubprocVecEnv(fns) if n > 1 else FreshInfoVecEnv(fns)
