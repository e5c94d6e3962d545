"""Replay buffer for semi-MDP transitions with action masks, one ring per parallel env (SB3's layout).

Each slot stores (obs, mask, action, reward, heuristic, dt, next_obs, next_mask, terminated, truncated); the
mask of ``obs`` is what SAC's policy loss sums over. The shaped
reward and the discount are *not* stored: they are computed when a batch is drawn, from the current
shaping weight and discount, because HuRL changes both between episodes (the reshaped MDP of stage k is
the one trained on). Per transition the discount is ``gamma ** (dt / tau)`` (``tau`` null: ``gamma`` per
decision, whatever its duration); n-step returns chain
transitions of the same env up to the first episode end:

    R = sum_j (prod_{i<j} g_i) * r~_j,   target = R + (1 - terminated_last) * prod_j g_j * Q'(s'_last)

so a truncated episode still bootstraps (Gymnasium's terminated / truncated distinction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the per-slot arrays state_dict() saves (with action_vecs when the agent stores action vectors, and meta)
ARRAYS = ("obs", "next_obs", "next_masks", "masks", "actions", "rewards", "heuristic", "dt", "terminated", "truncated")


@dataclass
class Batch:
    obs: np.ndarray
    actions: np.ndarray
    returns: np.ndarray      # n-step shaped return R
    discounts: np.ndarray    # product of the per-transition discounts (0 where the last one terminated)
    next_obs: np.ndarray
    next_masks: np.ndarray
    masks: np.ndarray | None = None  # action masks of obs
    action_vecs: np.ndarray | None = None  # continuous action vectors (agents/sac_argmax.py)


class ReplayBuffer:
    def __init__(self, capacity: int, num_envs: int, obs_dim: int, n_actions: int, seed: int = 0,
                 action_dim: int = 0) -> None:
        self.cap = max(1, capacity // num_envs)
        self.num_envs = num_envs
        shape = (self.cap, num_envs)
        self.obs = np.zeros(shape + (obs_dim,), np.float32)
        self.next_obs = np.zeros(shape + (obs_dim,), np.float32)
        self.next_masks = np.zeros(shape + (n_actions,), np.bool_)
        self.masks = np.ones(shape + (n_actions,), np.bool_)
        self.action_vecs = np.zeros(shape + (action_dim,), np.float32) if action_dim else None
        self.actions = np.zeros(shape, np.int64)
        self.rewards = np.zeros(shape, np.float32)
        self.heuristic = np.zeros(shape, np.float32)
        self.dt = np.zeros(shape, np.float32)
        self.terminated = np.zeros(shape, np.bool_)
        self.truncated = np.zeros(shape, np.bool_)
        self.pos = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)
        # the same memory seen as (cap * num_envs, ...): a batch is one take of flat rows per field
        self.rows = {k: getattr(self, k).reshape(self.cap * num_envs, *getattr(self, k).shape[2:])
                     for k in (*ARRAYS, "action_vecs") if getattr(self, k) is not None}

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, heuristic: np.ndarray, dt: np.ndarray,
            next_obs: np.ndarray, next_masks: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            masks: np.ndarray | None = None, action_vecs: np.ndarray | None = None) -> None:
        """One transition per env (arrays with a leading num_envs axis)."""
        p = self.pos
        if action_vecs is not None and self.action_vecs is not None:
            self.action_vecs[p] = action_vecs
        if masks is not None:
            self.masks[p] = masks
        self.obs[p] = obs
        self.actions[p] = actions
        self.rewards[p] = rewards
        self.heuristic[p] = heuristic
        self.dt[p] = dt
        self.next_obs[p] = next_obs
        self.next_masks[p] = next_masks
        self.terminated[p] = terminated
        self.truncated[p] = truncated
        self.pos = (p + 1) % self.cap
        self.size = min(self.size + 1, self.cap)

    def __len__(self) -> int:
        return self.size * self.num_envs

    def sample(self, batch_size: int, gamma: float, tau: float | None, shaping: float = 0.0, n_step: int = 1) -> Batch:
        """A batch drawn uniformly; ``gamma`` / ``shaping`` are the current stage's discount and h weight."""
        n_step = max(1, int(n_step))
        usable = self.size - (n_step - 1)  # the newest n-1 slots lack a complete look-ahead window
        if usable <= 0:
            raise ValueError(f"replay buffer holds {self.size} steps per env; n-step {n_step} needs more")
        start = self.pos - self.size  # chronological index c lives at (start + c) % cap
        c = self.rng.integers(0, usable, size=batch_size)
        env = self.rng.integers(0, self.num_envs, size=batch_size)
        p0 = (start + c) % self.cap
        first = p0 * self.num_envs + env  # row of (slot, env) in the arrays seen as (cap * num_envs, ...)
        if n_step == 1:
            (ret, disc), last = self.one_step(first, gamma, tau, shaping), first
        else:
            ret, disc, last_slot = self.n_step_returns(p0, env, gamma, tau, shaping, n_step)
            last = last_slot * self.num_envs + env
        disc = np.where(self.rows["terminated"][last], 0.0, disc)
        rows = self.rows
        return Batch(rows["obs"].take(first, axis=0), rows["actions"].take(first), ret.astype(np.float32),
                     disc.astype(np.float32), rows["next_obs"].take(last, axis=0),
                     rows["next_masks"].take(last, axis=0), rows["masks"].take(first, axis=0),
                     rows["action_vecs"].take(first, axis=0) if self.action_vecs is not None else None)

    def discount_log(self, gamma: float, tau: float | None) -> tuple[bool, float]:
        """(discount per decision?, log of the discount per second or per decision)."""
        per_step = tau is None or tau <= 0  # discount gamma per decision, whatever its duration
        return per_step, np.log(gamma) / (1.0 if per_step else tau) if gamma > 0 else -np.inf

    def discounts(self, rows: np.ndarray, gamma: float, per_step: bool, log_g: float) -> np.ndarray:
        """The per-transition discounts g of the given rows (float64)."""
        if gamma <= 0:
            return np.zeros(len(rows))
        if per_step:
            return np.full(len(rows), gamma)
        return np.exp(log_g * self.rows["dt"][rows].astype(np.float64))

    def one_step(self, rows: np.ndarray, gamma: float, tau: float | None, shaping: float) -> tuple[np.ndarray,
                                                                                                  np.ndarray]:
        """(R, D) for n_step = 1: the n-step sums below with one term, the same numbers without the loop."""
        r = self.rows["rewards"][rows] + shaping * self.rows["heuristic"][rows]
        per_step, log_g = self.discount_log(gamma, tau)
        return r.astype(np.float64) + 0.0, self.discounts(rows, gamma, per_step, log_g)

    def n_step_returns(self, p0: np.ndarray, env: np.ndarray, gamma: float, tau: float | None, shaping: float,
                       n_step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(R, D before the terminal cut, slot of the last transition) of n-step windows starting at slots p0."""
        batch_size = len(p0)
        ret = np.zeros(batch_size, np.float64)
        disc = np.ones(batch_size, np.float64)
        alive = np.ones(batch_size, np.bool_)
        last = p0.copy()
        ended = np.zeros(batch_size, np.bool_)
        per_step, log_g = self.discount_log(gamma, tau)
        for j in range(n_step):
            p = (p0 + j) % self.cap
            rows = p * self.num_envs + env
            if j:
                alive &= ~ended
            r = self.rows["rewards"][rows] + shaping * self.rows["heuristic"][rows]
            ret += np.where(alive, disc * r, 0.0)
            disc = np.where(alive, disc * self.discounts(rows, gamma, per_step, log_g), disc)
            last = np.where(alive, p, last)
            ended = self.rows["terminated"][rows] | self.rows["truncated"][rows]
        return ret, disc, last

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {k: getattr(self, k) for k in ARRAYS}
        if self.action_vecs is not None:
            out["action_vecs"] = self.action_vecs
        out["meta"] = np.array([self.pos, self.size], np.int64)
        return out

    def load_state_dict(self, d: dict[str, np.ndarray]) -> None:
        """Arrays saved by :meth:`state_dict` (agents/checkpoint_files.py reads them without pickle); ValueError
        naming the field for an unknown field or another shape, before anything is changed."""
        fields = {k: getattr(self, k) for k in ARRAYS}
        if self.action_vecs is not None:
            fields["action_vecs"] = self.action_vecs
        unknown = sorted(set(d) - set(fields) - {"meta"})
        if unknown:
            raise ValueError(f"replay buffer: unknown field(s) {unknown}; expected {sorted([*fields, 'meta'])}")
        for k, v in d.items():
            if k != "meta" and fields[k].shape != v.shape:
                raise ValueError(f"replay buffer field {k}: saved shape {v.shape}, expected {fields[k].shape}")
        meta = np.asarray(d.get("meta"))
        if meta.shape != (2,) or meta.dtype.kind not in "iu" or not 0 <= meta[1] <= self.cap or \
                not 0 <= meta[0] < self.cap:
            raise ValueError(f"replay buffer field meta: expected [pos, size] within capacity {self.cap}, got "
                             f"{meta.tolist()}")
        for k, v in d.items():
            if k != "meta":
                fields[k][...] = v
        self.pos, self.size = (int(x) for x in meta)
