"""QLM's request-completion-time (RCT) estimator (the QLM paper's §6), standalone: how long a request waits
behind the work queued ahead of it and how long it then runs, as a Normal a plan can put in a chance constraint.

    C_q = W_q + P + D_q,   W_q = (output tokens still to generate ahead of q) / Theta,   D_q = O_q * eps * d

with O ~ Normal(mu_o, sigma_o) per request group, so C_q is returned as a Normal (mean, std). Theta, eps, d and the
prefill time P come from a llmsim step-time profile (:func:`rates_from_profile`), never from the simulation being
predicted, so the R^2 reported by ``python -m experiments.studies.qlm_r2 --r2`` is an honest accuracy figure. See
docs/qlm_estimator.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import erfcx

from llmsim.engine.config import EngineConfig
from llmsim.perf.profile import Profile


def check_number(name: str, value: Any, *, positive: bool = False) -> float:
    """A finite, non-negative (or positive) float, else a ValueError naming the argument."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if v < 0 or (positive and v == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return v


@dataclass(frozen=True)
class EngineRates:
    """Profiled constants of one (model, GPU, engine config); see :func:`rates_from_profile` for their origin.

    ``theta``: output tokens/s of a full batch in steady state (prefill stalls included); ``d``: decode step
    time of a lone sequence (s/token); ``epsilon``: per-token slowdown a request sees inside a full batch
    relative to ``d`` (eps * d = its per-token time there); ``batch_size``: the full batch (sequences);
    ``prefill_a/b/c``: P(p) = a + b p + c p^2 seconds for a prompt of p tokens (the step that also emits the
    first token); ``decode_step_full``: decode step time of the full batch, kept for occupancy-aware callers.
    """

    theta: float
    epsilon: float
    d: float
    batch_size: int
    prefill_a: float
    prefill_b: float
    prefill_c: float
    decode_step_full: float
    typical_prompt: int
    typical_output: int
    typical_context: int

    def prefill_time(self, prompt_tokens: float) -> float:
        p = check_number("prompt_tokens", prompt_tokens)
        return max(0.0, self.prefill_a + self.prefill_b * p + self.prefill_c * p * p)

    @property
    def decode_per_token(self) -> float:
        """eps * d: seconds per output token of a request decoding inside a full batch."""
        return self.epsilon * self.d

    def per_token_at(self, batch: float) -> float:
        """Per-token time inside a batch of ``batch`` sequences (linear between d at 1 and eps*d at full).

        Not in the paper (its eps is one constant); offered for callers that observe the batch occupancy.
        """
        b = min(max(check_number("batch", batch), 1.0), float(self.batch_size))
        if self.batch_size <= 1:
            return self.decode_per_token
        return self.d + (self.decode_per_token - self.d) * (b - 1.0) / (self.batch_size - 1.0)


def _kv_capacity(profile: Profile, cfg: EngineConfig) -> int:
    if cfg.num_gpu_blocks is not None:
        return int(cfg.num_gpu_blocks) * int(cfg.block_size)
    return int(profile.kv_capacity_tokens(cfg.gpu_memory_utilization))


def _prefill_fit(profile: Profile, scale: float, max_prompt: int) -> tuple[float, float, float]:
    """Least-squares quadratic through the profile's single-prompt prefill step over 1..max_prompt tokens."""
    ps = np.unique(np.linspace(1, max(2, max_prompt), 64).round().astype(int))
    ts = np.array([scale * profile.step_time(int(p), 1, int(p) * int(p), 0, 0, 0) for p in ps])
    c, b, a = np.polyfit(ps.astype(float), ts, 2)
    return float(a), float(b), float(c)


def rates_from_profile(
    profile: Profile,
    engine_config: EngineConfig | None = None,
    typical_context: int | None = None,
    *,
    typical_prompt: int = 512,
    typical_output: int = 256,
) -> EngineRates:
    """Theta, eps, d and P of ``profile`` under ``engine_config``, from its step_time alone.

    The paper profiles these from "a single batch of requests" and gives no formula, so (our choices):

    * context: a decoding sequence holds ``typical_context`` KV tokens, default prompt + output / 2 (the mean
      over its decode steps);
    * full batch B* = min(max_num_seqs, KV capacity // typical_context): the batch the engine can keep running;
    * d = step_time of one decode of a lone sequence at that context (unbatched per-token decode time);
    * s_B = step_time of one decode iteration of B* sequences; P(p) = step_time of a lone prefill of p tokens
      (vLLM V0 prefills whole prompts in decode-free iterations, so a prefill stalls the whole batch);
    * Theta = B* O / (O s_B + B* P(prompt)): in steady state the batch turns over once per O iterations and
      each of the B* newcomers' prefills stalls it, so Theta is output tokens per second of wall time;
    * eps = (s_B + (B* - 1) P(prompt) / O) / d: a request in a full batch waits one batched step per token
      plus the prefills of the B* - 1 others admitted during its life, relative to decoding alone.
      Preemption (recompute) cost is not added: B* is already capped by the KV cache.

    ``engine_config.step_time_scale`` multiplies every step, as in the engine.
    """
    cfg = (engine_config or EngineConfig()).resolved(profile.model.max_position, profile.model.name)
    prompt = int(check_number("typical_prompt", typical_prompt, positive=True))
    out = int(check_number("typical_output", typical_output, positive=True))
    ctx = int(check_number("typical_context", typical_context, positive=True)) if typical_context is not None \
        else prompt + max(1, out // 2)
    scale = float(cfg.step_time_scale)
    batch = max(1, min(int(cfg.max_num_seqs), _kv_capacity(profile, cfg) // ctx))
    d = scale * profile.step_time(1, 1, 0, 0, 1, ctx)
    s_full = scale * profile.step_time(batch, batch, 0, 0, batch, batch * ctx)
    a, b, c = _prefill_fit(profile, scale, int(cfg.max_model_len))
    pf = max(0.0, a + b * prompt + c * prompt * prompt)
    theta = batch * out / (out * s_full + batch * pf)
    eps = (s_full + (batch - 1) * pf / out) / d
    return EngineRates(theta, eps, d, batch, a, b, c, s_full, prompt, out, ctx)


@dataclass
class OutputLengthModel:
    """Normal(mean, std) of a request group's output tokens, shrunk towards a prior when samples are few.

    The paper fits (mu_o, sigma_o) offline per group and calls the approach Bayesian without detail; we use
    a conjugate-style pseudo-count: ``prior_weight`` virtual samples at (prior_mean, prior_std), so an
    empty group answers the prior and a well-sampled one its sample moments.
    """

    prior_mean: float = 256.0
    prior_std: float = 128.0
    prior_weight: float = 5.0
    mean: float = float("nan")
    std: float = float("nan")
    n: int = 0

    def __post_init__(self) -> None:
        check_number("prior_mean", self.prior_mean, positive=True)
        check_number("prior_std", self.prior_std)
        check_number("prior_weight", self.prior_weight)
        if self.n == 0:
            self.mean, self.std = float(self.prior_mean), float(self.prior_std)

    def fit(self, lengths: Sequence[float] | np.ndarray) -> OutputLengthModel:
        """Refit from observed output lengths (all of them; call again with more); returns self."""
        x = np.asarray(lengths, dtype=float).ravel()
        if x.size and (not np.all(np.isfinite(x)) or np.any(x < 0)):
            raise ValueError("lengths must be finite and >= 0")
        n, k = x.size, float(self.prior_weight)
        if n == 0 or n + k <= 0:
            self.mean, self.std, self.n = float(self.prior_mean), float(self.prior_std), 0
            return self
        m = float(x.mean())
        ss = float(((x - m) ** 2).sum())
        mean = (n * m + k * self.prior_mean) / (n + k)
        # pooled spread: sample scatter + prior pseudo-scatter + the gap between sample and prior means
        var = (ss + k * self.prior_std**2 + n * k / (n + k) * (m - self.prior_mean) ** 2) / max(n + k - 1, 1)
        if k == 0:
            var = ss / max(n - 1, 1)
        self.mean, self.std, self.n = mean, math.sqrt(var), n
        return self

    def remaining(self, generated: np.ndarray | Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of tokens still to generate given ``generated`` so far: O - g given O > g.

        Truncated-Normal moments (inverse Mills ratio via erfcx, stable far in the tail); at least 1 token.
        """
        g = np.asarray(generated, dtype=float)
        if self.std <= 0:
            return np.maximum(self.mean - g, 1.0), np.zeros_like(g)
        alpha = (g - self.mean) / self.std
        lam = math.sqrt(2.0 / math.pi) / erfcx(alpha / math.sqrt(2.0))  # phi(alpha) / (1 - Phi(alpha))
        mean = np.maximum(self.mean + self.std * lam - g, 1.0)
        var = np.maximum(self.std**2 * (1.0 + alpha * lam - lam**2), 0.0)
        return mean, var


def estimate_completion(
    rates: EngineRates,
    tokens_ahead: float,
    prompt_tokens: float,
    output_mean: float,
    output_std: float,
    *,
    tokens_ahead_std: float = 0.0,
    per_token: float | None = None,
) -> tuple[float, float]:
    """Completion time (s after arrival) of a request as Normal (mean, std): Eqs. 1-4 of the paper.

    mean = tokens_ahead / Theta + P(prompt) + (mu_o - 1) eps d: the prefill step emits the first token, so
    only mu_o - 1 decode steps follow (the paper writes mu_o; the difference is one step). std combines the
    uncertainty of the work ahead (``tokens_ahead_std`` / Theta) and of the own output (sigma_o eps d),
    independent. ``per_token`` overrides eps d (e.g. :meth:`EngineRates.per_token_at` the observed batch).
    """
    ahead = check_number("tokens_ahead", tokens_ahead)
    ahead_sd = check_number("tokens_ahead_std", tokens_ahead_std)
    mu = check_number("output_mean", output_mean)
    sd = check_number("output_std", output_std)
    tpt = rates.decode_per_token if per_token is None else check_number("per_token", per_token)
    mean = ahead / rates.theta + rates.prefill_time(prompt_tokens) + max(mu - 1.0, 0.0) * tpt
    std = math.hypot(ahead_sd / rates.theta, sd * tpt)
    return mean, std


GROUP_SAMPLES = 1000  # Monte Carlo draws of a group's output lengths for Eq. 5
GROUP_SEED = 0
_GROUP_MAX: dict[tuple[float, float, float, float], tuple[np.ndarray, np.ndarray]] = {}  # per (mu, sd, Theta, tpt)


def group_completion(
    rates: EngineRates,
    size: int,
    prompt_tokens: float,
    output_mean: float,
    output_std: float,
    *,
    tokens_ahead: float = 0.0,
    tokens_ahead_std: float = 0.0,
    per_token: float | None = None,
) -> tuple[float, float]:
    """Completion time of a whole request group (the paper's Eq. 5, C = max_q C_q) as a Normal (mean, std).

    The ``size`` requests are served FCFS: request q waits for the ``tokens_ahead`` before the group and for the
    q - 1 requests of the group before it (Eq. 2), then runs as in :func:`estimate_completion`, each with its own
    O_q ~ Normal(mu_o, sigma_o). The max has no closed form: its mean and std come from Monte Carlo over the
    lengths with a fixed seed (same inputs, same answer), and are moment-matched to a Normal for the
    plan's chance constraint. A group of one is :func:`estimate_completion` exactly. Why the max and not the last
    request: each request's own decode time varies by sigma_o eps d, far more than the queue step mu_o / Theta, so
    an earlier request often finishes last and the last request's completion underestimates the group's.
    """
    n = int(check_number("size", size, positive=True))
    mean, std = estimate_completion(rates, tokens_ahead, prompt_tokens, output_mean, output_std,
                                    tokens_ahead_std=tokens_ahead_std, per_token=per_token)
    if n == 1:
        return mean, std
    tpt = rates.decode_per_token if per_token is None else float(per_token)
    m_max, s_max = _max_of_group(n, float(output_mean), float(output_std), float(rates.theta), tpt)
    ahead_mean = check_number("tokens_ahead", tokens_ahead) / rates.theta
    ahead_sd = check_number("tokens_ahead_std", tokens_ahead_std) / rates.theta
    return ahead_mean + rates.prefill_time(prompt_tokens) + m_max, math.hypot(ahead_sd, s_max)


def _max_of_group(n: int, mu: float, sd: float, theta: float, tpt: float) -> tuple[float, float]:
    """Mean and std of max_q [sum_{i<q} O_i / Theta + (O_q - 1) tpt] over q = 1..n, O_i ~ Normal(mu, sd) i.i.d.

    One draw serves every size up to a power of two: the running max over q gives all of them at once, and
    the draws of the first n requests do not depend on how many were drawn, so the answer for n never does."""
    key = (mu, sd, theta, tpt)
    got = _GROUP_MAX.get(key)
    if got is None or len(got[0]) < n:
        rows = max(64, 1 << (n - 1).bit_length())
        o = mu + sd * np.random.default_rng(GROUP_SEED).standard_normal((rows, GROUP_SAMPLES))
        ahead = np.cumsum(o, axis=0) - o  # tokens of the group's requests before q
        c = ahead / theta + (o - 1.0) * tpt
        run = np.maximum.accumulate(c, axis=0)  # row n - 1: the max over the first n
        if len(_GROUP_MAX) >= 256:
            _GROUP_MAX.clear()
        got = _GROUP_MAX[key] = ((run - c).mean(axis=1), run.std(axis=1))
    # E[max] = E[C_n] (exact) + E[max - C_n] (sampled, >= 0): never below the last request, less sampling noise
    return (n - 1) * mu / theta + (mu - 1.0) * tpt + float(got[0][n - 1]), float(got[1][n - 1])


def r2_score(actual: Sequence[float] | np.ndarray, predicted: Sequence[float] | np.ndarray) -> float:
    """Coefficient of determination of ``predicted`` against the identity line: 1 - SS_res / SS_tot."""
    y, f = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    if y.shape != f.shape or y.size < 2:
        raise ValueError("actual and predicted must have the same length >= 2")
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - f) ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
