"""Heuristic-guided RL of the Intelligent Router for LLM Workloads (its section 3.4): three ways to use the
workload-mixing heuristic h <= 0.

The env computes h(s, s') for every routing decision (``info["reward_components"]["heuristic"]``, times
``env.reward_scale``: 0 when the request goes to the instance with the least mixing impact, negative
otherwise, 0 for wait) and the agent trains on

    r~ = r + w_k * h,  discounted by gamma~_k  (per transition gamma~_k ** (dt / tau))

* ``none``   (Baseline RL):        w_k = 0,                gamma~_k = gamma
* ``aware``  (Workload-Aware RL):  w_k = 1,                gamma~_k = gamma   (h "directly augmented")
* ``guided`` (Workload-Guided RL, HuRL): w_k = gamma * exp(-beta k), gamma~_k = gamma * (1 - exp(-beta k)),
  beta = 0.5, k = training episodes finished so far. This is the paper's section 6 form: the guidance fades and
  the discount rises back to gamma, as in HuRL (Cheng et al. 2021: r~ = r + (1 - lambda) gamma h(s'),
  gamma~ = lambda gamma with lambda -> 1). Section 5.3's contradicting "lambda_k settles to zero" is not used.

Why shaping happens in the agent, not the env: the replay buffer keeps r and h apart, so every batch is scored
under the current stage's (w_k, gamma~_k), evaluation rewards stay the plain r for every variant, and the env
needs no per-episode state pushed into worker processes. The env's own ``reward.guidance`` must then be 0.
"""

from __future__ import annotations

import math

VARIANTS = ("none", "aware", "guided")


def stage(variant: str, episode: int, gamma: float, beta: float = 0.5) -> tuple[float, float]:
    """(shaping weight w_k, training discount gamma~_k) after ``episode`` finished training episodes."""
    if variant == "none":
        return 0.0, gamma
    if variant == "aware":
        return 1.0, gamma
    if variant == "guided":
        lam = math.exp(-beta * episode)
        return gamma * lam, gamma * (1.0 - lam)
    raise ValueError(f"agent.guidance: {variant!r} is not one of {', '.join(VARIANTS)}")
