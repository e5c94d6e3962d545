"""QLM's request-completion-time (RCT) estimator (shared/specs/003 section 2, paper section 6), standalone.

    C_q = W_q + P + D_q,   W_q = (output tokens still to generate ahead of q) / Theta,   D_q = O_q * eps * d

with O ~ Normal(mu_o, sigma_o) per request group, so C_q is returned as a Normal (mean, std) that a plan
generator can put in a chance constraint. Theta, eps, d and the prefill time P come from a llmsim step-time
profile (:func:`rates_from_profile`), never from the simulation being predicted, so the R^2 reported by
``python -m llmsim.policies.qlm_estimator --r2`` is an honest accuracy figure. See docs/qlm_estimator.md.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import erfcx

from llmsim.engine import EngineConfig
from llmsim.profile import Profile


def _check(name: str, value: Any, *, positive: bool = False) -> float:
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
        p = _check("prompt_tokens", prompt_tokens)
        return max(0.0, self.prefill_a + self.prefill_b * p + self.prefill_c * p * p)

    @property
    def decode_per_token(self) -> float:
        """eps * d: seconds per output token of a request decoding inside a full batch."""
        return self.epsilon * self.d

    def per_token_at(self, batch: float) -> float:
        """Per-token time inside a batch of ``batch`` sequences (linear between d at 1 and eps*d at full).

        Not in the paper (its eps is one constant); offered for callers that observe the batch occupancy.
        """
        b = min(max(_check("batch", batch), 1.0), float(self.batch_size))
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
    prompt = int(_check("typical_prompt", typical_prompt, positive=True))
    out = int(_check("typical_output", typical_output, positive=True))
    ctx = int(_check("typical_context", typical_context, positive=True)) if typical_context is not None \
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
        _check("prior_mean", self.prior_mean, positive=True)
        _check("prior_std", self.prior_std)
        _check("prior_weight", self.prior_weight)
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
    ahead = _check("tokens_ahead", tokens_ahead)
    ahead_sd = _check("tokens_ahead_std", tokens_ahead_std)
    mu = _check("output_mean", output_mean)
    sd = _check("output_std", output_std)
    tpt = rates.decode_per_token if per_token is None else _check("per_token", per_token)
    mean = ahead / rates.theta + rates.prefill_time(prompt_tokens) + max(mu - 1.0, 0.0) * tpt
    std = math.hypot(ahead_sd / rates.theta, sd * tpt)
    return mean, std


def r2_score(actual: Sequence[float] | np.ndarray, predicted: Sequence[float] | np.ndarray) -> float:
    """Coefficient of determination of ``predicted`` against the identity line: 1 - SS_res / SS_tot."""
    y, f = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    if y.shape != f.shape or y.size < 2:
        raise ValueError("actual and predicted must have the same length >= 2")
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - f) ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")


# ---------------------------------------------------------------------------------------------------------------
# R^2 against the simulator: one instance, FCFS (vLLM V0), Poisson arrivals, three request groups.

@dataclass(frozen=True)
class Group:
    """A synthetic request group: log-normal prompts, gamma output lengths (not Normal: the fit is tested)."""

    name: str
    prompt_mean: float
    output_mean: float
    output_std: float


GROUPS = (Group("short", 200, 64, 24), Group("chat", 500, 256, 96), Group("long", 1000, 512, 192))
MAX_OUTPUT = 1024  # the serving system's max-tokens cap, which the paper relies on to remove outliers


def draw_lengths(rng: np.random.Generator, group: Group, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) token counts for ``n`` requests of ``group``."""
    sig = 0.5
    prompts = rng.lognormal(math.log(group.prompt_mean) - sig * sig / 2, sig, n).round().clip(1, 2048)
    shape = (group.output_mean / group.output_std) ** 2
    outputs = rng.gamma(shape, group.output_mean / shape, n).round().clip(1, MAX_OUTPUT)
    return prompts.astype(int), outputs.astype(int)


def _probe_router() -> Any:
    """A round-robin-on-one-instance router that records the queue (ids, tokens generated) at each arrival."""
    from llmsim.policies.base import Router

    class QueueProbe(Router):
        name = "qlm_queue_probe"  # not registered: only this experiment uses it

        def __init__(self) -> None:
            super().__init__(0)
            self.snapshots: dict[int, tuple[tuple[int, int, bool], ...]] = {}

        def route(self, req: Any, view: Any) -> int:
            det = view.state().instances[0].detail
            rows = [(r.id, r.generated, True) for r in det.running]
            rows += [(r.id, r.generated, False) for q in (det.swapped, det.waiting) for r in q]
            self.snapshots[req.id] = tuple(rows)
            return 0

    return QueueProbe()


@dataclass(frozen=True)
class Variant:
    """How the estimator sees the queue at an arrival.

    ``oracle``: true output lengths instead of group Normals. ``all_ahead``: running requests' remaining tokens
    count as "ahead" too (the paper's queue is the waiting queue, so False is the faithful reading).
    ``occupancy``: per-token time at the observed occupancy (queue + 1, capped at B*) instead of the constant
    eps * d; a refinement that is not in the paper.
    """

    oracle: bool = False
    all_ahead: bool = False
    occupancy: bool = False

    @property
    def label(self) -> str:
        parts = ["oracle" if self.oracle else "group-mean", "all-ahead" if self.all_ahead else "waiting"]
        return "/".join(parts + ["occupancy" if self.occupancy else "const-eps"])


def _estimates(rates: EngineRates, reqs: list, group_of: dict[int, int], fits: list[OutputLengthModel],
               snaps: dict, v: Variant) -> np.ndarray:
    true_out = {r.id: r.output_tokens for r in reqs}
    est = np.empty(len(reqs))
    for k, r in enumerate(reqs):
        rows = [row for row in snaps[r.id] if v.all_ahead or not row[2]]
        if v.oracle:
            ahead = float(sum(max(true_out[i] - g, 0) for i, g, _ in rows))
            ahead_sd, mu, sd = 0.0, float(r.output_tokens), 0.0
        else:
            ahead, var = 0.0, 0.0
            for gi, fit in enumerate(fits):
                gen = [g for i, g, _ in rows if group_of[i] == gi]
                if gen:
                    m, s2 = fit.remaining(gen)
                    ahead, var = ahead + float(m.sum()), var + float(s2.sum())
            ahead_sd, fit = math.sqrt(var), fits[group_of[r.id]]
            mu, sd = fit.mean, fit.std
        tpt = rates.per_token_at(len(snaps[r.id]) + 1) if v.occupancy else None
        est[k] = estimate_completion(rates, ahead, r.prompt_tokens, mu, sd, tokens_ahead_std=ahead_sd,
                                     per_token=tpt)[0]
    return est


DEFAULT_VARIANTS = (Variant(), Variant(oracle=True), Variant(occupancy=True), Variant(oracle=True, occupancy=True))


def offline_profile(profile: Profile, seed: int, n_per_group: int = 300) -> tuple[EngineRates, list[OutputLengthModel]]:
    """The paper's two offline steps on a sample disjoint from the evaluated one: per-group output Normals
    and the hardware rates at the workload's mean prompt, mean output and length-biased decode context.

    Length-biased: a sequence sits in the batch for O steps, so the batch's mean context is
    E[(prompt + O / 2) O] / E[O], not E[prompt] + E[O] / 2 (long requests dominate the KV cache).
    """
    rng = np.random.default_rng(seed)
    samples = [draw_lengths(rng, g, n_per_group) for g in GROUPS]
    fits = [OutputLengthModel().fit(o) for _, o in samples]
    p = np.concatenate([s[0] for s in samples]).astype(float)
    o = np.concatenate([s[1] for s in samples]).astype(float)
    ctx = int(((p + o / 2) * o).sum() / o.sum())
    rates = rates_from_profile(profile, EngineConfig(), ctx, typical_prompt=int(p.mean()), typical_output=int(o.mean()))
    return rates, fits


def r2_experiment(model: str = "llama-2-7b", gpu: str = "a100-80gb", n_requests: int = 2000,
                  rate: float = 1.0, seed: int = 0, variants: Sequence[Variant] = (),
                  profile: Profile | None = None, tp: int = 1) -> dict[str, Any]:
    """Simulate one FCFS instance at ``rate`` req/s and score the estimator made at each arrival.

    Groups are fitted offline on a separate sample (``seed + 1``) as in the paper; ``rates`` come from the
    profile with that sample's mean lengths. Arrivals go on for ``n_requests // 4`` more requests that are not
    scored, so the scored ones never see the batch drain at the end of a finite trace (a steady stream does not
    drain). Returns rates, R^2 per variant (over the first ``n_requests``) and latency stats.
    """
    from llmsim.cluster import InstanceConfig
    from llmsim.profile import load_profile
    from llmsim.request import Request
    from llmsim.sim import simulate

    _check("rate", rate, positive=True)
    n_total = int(_check("n_requests", n_requests, positive=True)) + n_requests // 4
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, len(GROUPS), n_total)
    prompts, outputs = np.empty(n_total, int), np.empty(n_total, int)
    for gi, g in enumerate(GROUPS):
        mask = groups == gi
        prompts[mask], outputs[mask] = draw_lengths(rng, g, int(mask.sum()))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n_total))
    reqs = [Request(i, float(arrivals[i]), int(prompts[i]), int(outputs[i])) for i in range(n_total)]
    prof = profile if profile is not None else load_profile(model, gpu, tp)
    rates, fits = offline_profile(prof, seed + 1)
    probe = _probe_router()
    res = simulate([InstanceConfig(model=model, gpu=gpu, tp=tp, profile=prof)], reqs, probe)
    scored = reqs[:n_requests]
    df = res.requests.set_index("id").loc[[r.id for r in scored]]
    actual = (df["finish"] - df["arrival"]).to_numpy()
    group_of = {i: int(groups[i]) for i in range(n_total)}
    variants = variants or DEFAULT_VARIANTS
    r2 = {v.label: r2_score(actual, _estimates(rates, scored, group_of, fits, probe.snapshots, v)) for v in variants}
    return {"rate": rate, "rates": rates, "r2": r2, "mean_latency_s": float(actual.mean()),
            "p99_latency_s": float(np.quantile(actual, 0.99)), "preemptions": int(df["preemptions"].sum())}


LOADS = (0.5, 0.8, 0.95, 1.2, 1.5)  # fractions of the profiled capacity Theta / mean output


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llmsim.policies.qlm_estimator --r2``: the R^2 table at a few load levels."""
    ap = argparse.ArgumentParser(prog="python -m llmsim.policies.qlm_estimator", description=__doc__.split("\n")[0])
    ap.add_argument("--r2", action="store_true", help="run the R^2 experiment")
    ap.add_argument("--model", default="llama-2-7b")
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rate", type=float, action="append", help="arrival rate(s), req/s (default: LOADS x capacity)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--all-variants", action="store_true", help="also count running requests as ahead")
    a = ap.parse_args(argv)
    if not a.r2:
        ap.print_help()
        return 0
    variants = [Variant(o, w, occ) for occ in (False, True) for w in (False, True) for o in (False, True)] \
        if a.all_variants else list(DEFAULT_VARIANTS)
    from llmsim.profile import load_profile

    prof = load_profile(a.model, a.gpu, a.tp)
    rates = offline_profile(prof, a.seed + 1)[0]
    cap = rates.theta / rates.typical_output
    loads = a.rate or [round(f * cap, 2) for f in LOADS]
    print(f"{a.model} on {a.gpu} (tp {a.tp}), {a.requests} requests, seed {a.seed}; capacity ~ {cap:.2f} req/s")
    print("| rate (req/s) | load | mean / p99 latency (s) | " + " | ".join(f"R² {v.label}" for v in variants) + " |")
    print("|---|---|---|" + "---|" * len(variants))
    for rate in loads:
        out = r2_experiment(a.model, a.gpu, a.requests, rate, a.seed, variants, prof, a.tp)
        cells = " | ".join(f"{out['r2'][v.label]:.3f}" for v in variants)
        print(f"| {rate:g} | {rate / cap:.2f} | {out['mean_latency_s']:.1f} / {out['p99_latency_s']:.1f} | {cells} |")
    r = out["rates"]
    print(f"rates: Theta={r.theta:.0f} tok/s, d={r.d * 1e3:.2f} ms, eps={r.epsilon:.2f}, B*={r.batch_size}, "
          f"P({r.typical_prompt})={r.prefill_time(r.typical_prompt) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
