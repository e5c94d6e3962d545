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
import torch
from stable_baselines3.common.vec_env import VecEnv

from llmsim.agents.base import LoopState, OffPolicyAgent
from llmsim.agents.buffer import ReplayBuffer
from llmsim.agents.resume import FORMAT, rng_text, set_rng

Flatten = Callable[[Any], np.ndarray]


def learn(agent: OffPolicyAgent, vec: VecEnv, rb: ReplayBuffer, total_steps: int, state: LoopState,
          on_episode: Callable[[LoopState, dict[str, Any]], None] | None = None,
          on_step: Callable[[LoopState, dict[str, float]], None] | None = None, seed: int = 0) -> LoopState:
    """Collect experience and train until ``total_steps`` env steps, from new episodes seeded by ``seed``.

    ``on_episode(state, final_info)`` runs when a training episode ends (logging, the progress bar);
    ``on_step(state, stats)`` after every round of steps (periodic evaluation and checkpoints)."""
    loop = Experience(agent, vec, rb, state)
    loop.start(seed)
    return loop.run(total_steps, on_episode, on_step)


class Experience:
    """The experience loop and what it carries from one round of steps to the next: the current observations and
    masks, the last training statistics, the per-request credits. Between two rounds (in ``on_step``) that is all
    of it, so :meth:`snapshot` then :meth:`restore` continue a run exactly (agents/resume.py)."""

    def __init__(self, agent: OffPolicyAgent, vec: VecEnv, rb: ReplayBuffer, state: LoopState) -> None:
        self.agent, self.vec, self.rb, self.state = agent, vec, rb, state
        self.stats: dict[str, float] = {}
        cfg = agent.cfg
        request = getattr(cfg, "reward_credit", "step") == "request"
        self.credit = RequestCredit(rb, vec.num_envs, cfg.reward_scale) if request else None
        self.obs = np.zeros((vec.num_envs, rb.obs.shape[-1]), np.float32)
        self.masks = np.ones((vec.num_envs, rb.masks.shape[-1]), np.bool_)

    def start(self, seed: int) -> None:
        """New episodes in every env, seeded ``seed``, ``seed + 1``, ..."""
        self.vec.seed(seed)
        self.obs = self.agent.flatten(self.vec.reset())
        self.masks = np.stack([ri["action_mask"] for ri in self.vec.reset_infos])

    def run(self, total_steps: int, on_episode: Callable[[LoopState, dict[str, Any]], None] | None = None,
            on_step: Callable[[LoopState, dict[str, float]], None] | None = None,
            stop_at: int | None = None) -> LoopState:
        """Steps, replay and updates until ``total_steps`` env steps (see :func:`learn`), or until the first round
        that reaches ``stop_at`` (a run stopped to be resumed: its schedules still span ``total_steps``)."""
        agent, vec, rb, state, credit = self.agent, self.vec, self.rb, self.state, self.credit
        cfg = agent.cfg
        flat = agent.flatten
        n_envs = vec.num_envs
        scale = float(vec.get_attr("reward_scale")[0])
        h_scale, rs = scale * cfg.guidance_scale, cfg.reward_scale
        obs, masks, stats = self.obs, self.masks, self.stats
        w, g = agent.stage(state.episode)
        end = total_steps if stop_at is None else min(stop_at, total_steps)
        while state.step < end:
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
            self.obs, self.masks = obs, masks
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
            self.stats = stats
            if on_step is not None:
                on_step(state, stats)
        return state

    def snapshot(self) -> dict[str, Any]:
        """What :meth:`restore` needs (between two rounds): tensors, plain values and JSON text only."""
        credit = None
        if self.credit is not None:
            credit = {"adds": self.credit.adds,
                      "slots": [[[rid, a, s] for rid, (a, s) in d.items()] for d in self.credit.slots]}
        return {"format": FORMAT, "replay_rng": rng_text(self.rb.rng), "obs": torch.from_numpy(self.obs.copy()),
                "masks": torch.from_numpy(self.masks.copy()), "stats": {k: float(v) for k, v in self.stats.items()},
                "credit": credit,
                "envs": [{**r, "actions": torch.from_numpy(r["actions"])}
                         for r in self.vec.env_method("episode_record")]}

    def restore(self, saved: dict[str, Any]) -> str | None:
        """Continue from a :meth:`snapshot`: the replay's RNG, the last statistics, and every env's episode in
        progress rebuilt with its credit book; None, or why the envs could not be (then :meth:`start` them)."""
        set_rng(self.rb.rng, saved["replay_rng"])
        self.stats = {str(k): float(v) for k, v in saved["stats"].items()}
        envs = saved["envs"]
        if len(envs) != self.vec.num_envs:
            return f"saved with {len(envs)} training env(s), this run has {self.vec.num_envs} (trainer.num_envs)"
        obs, masks = saved["obs"].numpy(), saved["masks"].numpy()
        if obs.shape != self.obs.shape or masks.shape != self.masks.shape:
            return (f"observations {list(obs.shape)} and masks {list(masks.shape)} saved, {list(self.obs.shape)} "
                    f"and {list(self.masks.shape)} in this run")
        for i, record in enumerate(envs):
            got, mask, why = self.vec.env_method("replay", record, indices=[i])[0]
            if why is None and not (np.array_equal(_single(self.agent.flatten, got).astype(obs.dtype), obs[i])
                                    and np.array_equal(mask, masks[i])):
                why = "its rebuilt episode reaches other observations than the saved ones"
            if why is not None:
                return f"training env {i}: {why}"
        self.obs, self.masks = obs.copy(), masks.copy()
        if self.credit is not None and saved.get("credit") is not None:
            self.credit.adds = int(saved["credit"]["adds"])
            self.credit.slots = [{int(rid): (int(a), int(s)) for rid, a, s in d} for d in saved["credit"]["slots"]]
        return None


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
