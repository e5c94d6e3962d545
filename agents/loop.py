"""The semi-MDP experience loop every agent shares: act in an SB3 VecEnv, store transitions, update on a schedule.

stable-baselines3 supplies the vector env (one process per env with ``trainer.num_envs`` > 1) and its
auto-reset conventions (``terminal_observation``, ``TimeLimit.truncated``); the loop is ours because the
replay must keep the action masks, the semi-MDP ``dt`` and the Intelligent Router's heuristic term apart
(agents/buffer.py), which SB3's off-policy algorithms cannot. The loop calls an
:class:`~llmsim.agents.base.OffPolicyAgent`'s

* ``explore(obs, masks, state, total_steps) -> (actions, stats)``: behaviour actions for one observation per env
  (masked epsilon-greedy for Double DQN, a masked categorical sample for SAC);
* ``stage(episode) -> (w, gamma)``: the heuristic shaping weight and discount of the current episode
  (agents/guided.py; (0, gamma) for agents without guidance);
* ``update(batch) -> stats``: one gradient step;
* ``after_updates(step, prev)``: e.g. a hard target-network copy every ``target_update`` env steps;

and reads its ``cfg``'s ``learning_starts``, ``batch_size``, ``train_freq``, ``gradient_steps``, ``tau``, ``n_step``,
``reward_scale``, ``guidance_scale`` and ``reward_credit``.

``reward_credit: request`` moves each request's own part of a step's reward (the env's ``info["request_rewards"]``:
a completion's utility, a drop) from the step in which it happened to the transition that placed the request
(``info["decided"]``), in the replay, once it is known. Where a request finishes hundreds of decisions after it was
placed, a per-decision discount otherwise leaves almost nothing of the choice's own outcome in its Q-value (the
Learned Best-Effort router: rewards only at completion). A credit whose transition has left the ring, or came
from a request placed by no transition (a wait-timeout fallback), stays with its step; a batch drawn before a
request finished sees its transition without that credit yet.

Graph (Dict) observations are flattened by ``agent.flatten`` before they reach the agent and the replay, so both
store plain float vectors. An agent whose critic takes a continuous action
(agents/sac_argmax.py) leaves the vectors behind its decoded actions in ``agent.action_vectors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from llmsim.agents.base import LoopState, OffPolicyAgent
from llmsim.agents.buffer import ReplayBuffer

Flatten = Callable[[Any], np.ndarray]


def learn(agent: OffPolicyAgent, vec: VecEnv, rb: ReplayBuffer, total_steps: int, state: LoopState,
          on_episode: Callable[[LoopState, dict[str, Any]], None] | None = None,
          on_step: Callable[[LoopState, dict[str, float]], None] | None = None, seed: int = 0) -> LoopState:
    """Collect experience and train until ``total_steps`` env steps.

    ``on_episode(state, final_info)`` runs when a training episode ends (logging, the progress bar);
    ``on_step(state, stats)`` after every round of steps (periodic evaluation and checkpoints)."""
    cfg = agent.cfg
    flat = agent.flatten
    n_envs = vec.num_envs
    scale = float(vec.get_attr("reward_scale")[0])
    h_scale, rs = scale * cfg.guidance_scale, cfg.reward_scale
    vec.seed(seed)
    obs = flat(vec.reset())
    masks = np.stack([ri["action_mask"] for ri in vec.reset_infos])
    w, g = agent.stage(state.episode)
    stats: dict[str, float] = {}
    credit = RequestCredit(rb, n_envs, rs) if getattr(cfg, "reward_credit", "step") == "request" else None
    while state.step < total_steps:
        actions, act_stats = agent.explore(obs, masks, state, total_steps)
        next_obs_raw, rewards, dones, infos = vec.step(actions)
        next_obs = flat(next_obs_raw)
        next_masks = stacked([info["action_mask"] for info in infos])
        truncated = np.array([info.get("TimeLimit.truncated", False) for info in infos])
        h = np.array([info["reward_components"].get("heuristic", 0.0) * h_scale for info in infos], np.float32)
        dt = np.array([info["dt"] for info in infos], np.float32)
        ended = dones.nonzero()[0]  # (= np.flatnonzero for the 1-d dones, without its wrapper)
        real_next, new_masks = next_obs, next_masks  # the replay copies them; only an episode end changes them
        if len(ended):
            real_next, new_masks = next_obs.copy(), next_masks.copy()
            for i in ended:
                real_next[i] = _single(flat, infos[i]["terminal_observation"])
                new_masks[i] = vec.reset_infos[i]["action_mask"]
        if credit is not None:
            rewards = credit.before_add(infos, rewards)
        rb.add(obs, actions, rewards * rs, h * rs, dt, real_next, next_masks, dones & ~truncated, truncated,
               masks=masks, action_vecs=agent.action_vectors)
        if credit is not None:
            credit.after_add(ended)
        obs, masks = next_obs, new_masks
        prev = state.step
        state.step += n_envs
        for i in ended:
            state.episode += 1
            state.returns.append(float(infos[i].get("episode_reward", 0.0)))
            w, g = agent.stage(state.episode)
            if on_episode is not None:
                on_episode(state, infos[i])
        if state.step >= cfg.learning_starts and len(rb) >= cfg.batch_size:
            for _ in range(state.step // cfg.train_freq - prev // cfg.train_freq):
                for _ in range(cfg.gradient_steps):
                    stats = agent.update(rb.sample(cfg.batch_size, g, cfg.tau, w, cfg.n_step))
            agent.after_updates(state.step, prev)
        stats.update(act_stats)
        stats["shaping_weight"], stats["gamma"] = w, g
        if on_step is not None:
            on_step(state, stats)
    return state


def stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.stack(arrays)`` (a new array), a few microseconds cheaper for the usual single env."""
    if len(arrays) == 1:
        return arrays[0][None].copy()
    return np.stack(arrays)


def _single(flat: Flatten, obs: Any) -> np.ndarray:
    """Flatten one unbatched observation (a terminal observation) with the batched ``flat``."""
    if isinstance(obs, dict):
        return flat({k: np.asarray(v)[None] for k, v in obs.items()})[0]
    return flat(np.asarray(obs)[None])[0]


class RequestCredit:
    """``reward_credit: request``: which replay slot placed each request still running, and the credits owed."""

    def __init__(self, rb: ReplayBuffer, n_envs: int, reward_scale: float) -> None:
        self.rb, self.rs = rb, reward_scale
        self.adds = 0  # transitions per env added so far: a slot added ``cap`` adds ago has been overwritten
        self.slots: list[dict[int, tuple[int, int]]] = [{} for _ in range(n_envs)]  # request id -> (add, ring slot)
        self.owed: list[tuple[int, int, float]] = []  # (ring slot, env, reward) to apply once the slot is written

    def before_add(self, infos: list[dict[str, Any]], rewards: np.ndarray) -> np.ndarray:
        """This step's rewards without the credits that go to earlier (or this step's own) transitions."""
        out = np.array(rewards, dtype=np.float32)
        for i, info in enumerate(infos):
            slots = self.slots[i]
            if info.get("decided") is not None:
                slots[info["decided"]] = (self.adds, self.rb.pos)  # this step's transition goes to rb.pos
            for rid, r in (info.get("request_rewards") or {}).items():
                at = slots.pop(rid, None)
                if at is not None and self.adds - at[0] < self.rb.cap:
                    out[i] -= r
                    self.owed.append((at[1], i, r))
        return out

    def after_add(self, ended: np.ndarray) -> None:
        """Apply the credits to their slots; an ended episode's placements are owed nothing more."""
        rewards = self.rb.rewards
        for slot, i, r in self.owed:
            rewards[slot, i] += np.float32(r * self.rs)
        self.owed.clear()
        self.adds += 1
        for i in ended:
            self.slots[i].clear()
