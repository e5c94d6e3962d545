"""The RouteBalance testbed: 13 Qwen2.5 instances on 28 GPUs, prices, task mix, arrivals.

Everything a reproduction of RouteBalance (fused model routing and load balancing) needs besides the policy, built
from the paper's numbers; docs/routebalance_testbed.md records where each number comes from and what had to be
assumed. In short:

* **Cluster** (the paper's setup): Qwen2.5-72B x 2 on 4 x A100-80GB (TP4, gpu-memory-utilization 0.95), Qwen2.5-14B x 3
  on 4 x V100-32GB (TP4, 0.85), Qwen2.5-7B x 5 and Qwen2.5-3B x 3 on one A30 each (0.9); max-model-len 8192.
* **Prices** (the paper's setup): USD per 1M input / output tokens, 3B 0.06/0.06, 7B 0.07/0.07,
  14B 0.15/0.15, 72B 0.38/0.40 (``PRICES``, the RouteBalance policy's ``prices`` kwarg).
* **Tasks** (its test set): the seven source datasets with their test-set counts; per request a prompt length and,
  per model, an output length (clamped to max_tokens = 1024, its benchmark's) and a DeepEval-like quality in [0, 1]
  drawn by :class:`llmsim.envs.tasks.TaskSpec`. Per-tier mean quality is calibrated to the paper's always-3B 0.346 and
  always-14B 0.398; 7B and 72B are assumptions (0.372, 0.410: see ``TIER_QUALITY``); the per-request spread is
  calibrated so that the per-prompt oracle (max over the four models) is 0.582, as the paper reports.
* **Arrivals** (its benchmark): gamma renewal gaps with shape = burstiness (1 = Poisson), rescaled so that the last
  arrival falls at N / lambda as the paper's benchmark does; square wave ``lo,hi`` (hi*30 requests at hi req/s,
  then lo*30 at lo req/s, repeated).

The real per-(prompt, model) labels are in the Hugging Face dataset ``asdwb/route_balance_model_estimator``
(not available here); with it, :class:`llmsim.envs.tasks.LabelledPool` replaces this parametric model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.envs.tasks import TaskMixture, TaskSpec
from llmsim.errors import ConfigError
from llmsim.request import Request

MODELS = ("qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-72b")
MAX_MODEL_LEN = 8192  # the paper's setup: vLLM --max-model-len 8192 on every tier
MAX_TOKENS = 1024  # its benchmark: --custom-output-len 1024 --max-output-len 1024
NUM_REQUESTS = 3534  # its serving test set (3,534 of the 3,634 test prompts)
SEED = 5  # its re-run scripts' --seed 5
RATES = (6.0, 8.0, 10.0, 12.0, 18.0, 24.0, 30.0)  # its repository's lambda grid


@dataclass(frozen=True)
class Tier:
    """One tier of the testbed (the paper's setup)."""

    model: str
    gpu: str
    tp: int
    count: int
    gpu_memory_utilization: float
    price_in: float  # USD per 1M input tokens
    price_out: float  # USD per 1M output tokens
    price_source: str
    nominal_tpot_ms: float  # the arm-4 static prior ("low-load medians")


TIERS = (
    Tier("qwen2.5-72b", "a100-80gb", 4, 2, 0.95, 0.38, 0.40, "Novita AI", 47.4),
    Tier("qwen2.5-14b", "v100-32gb", 4, 3, 0.85, 0.15, 0.15, "Novita AI", 18.4),
    Tier("qwen2.5-7b", "a30", 1, 5, 0.90, 0.07, 0.07, "Novita AI", 20.6),
    Tier("qwen2.5-3b", "a30", 1, 3, 0.90, 0.06, 0.06, "Together AI", 12.3),
)
TIER_OF = {t.model: t for t in TIERS}
PRICES: dict[str, tuple[float, float]] = {t.model: (t.price_in, t.price_out) for t in TIERS}
NOMINAL_TPOT_MS: dict[str, float] = {t.model: t.nominal_tpot_ms for t in TIERS}

# ------------------------------------------------------------------------------------------------ quality
# Mean DeepEval quality per tier (after clipping to [0, 1]), served on the whole test set:
#   3B 0.346, 14B 0.398: the paper's always-3B / always-14B cells.
#   7B 0.372: ASSUMED midway between 3B and 14B (no always-7B number is given).
#   72B 0.410: ASSUMED, bracketed by the prompt-blind mix at the quality cell's tier shares = 0.401 with 51 % on
#   72B (the paper's quality cell): 0.404 if the other 49 % were all 14B, ~0.418 if they were split 30/9/10 % over
#   14B/7B/3B.
TIER_QUALITY = {"qwen2.5-3b": 0.346, "qwen2.5-7b": 0.372, "qwen2.5-14b": 0.398, "qwen2.5-72b": 0.410}
ORACLE_QUALITY = 0.582  # the paper's per-prompt argmax of judge scores
# Per-request model: q_m = clip(mu_m + QUALITY_SD * (rho * z_req + sqrt(1 - rho^2) * z_m), 0, 1). QUALITY_SD is
# an assumption (G-Eval scores spread widely over [0, 1]); QUALITY_RHO is then solved so that E[max_m q_m] = 0.582
# and the pre-clip means mu_m so that E[q_m] = TIER_QUALITY[m] (scipy, 4e5 draws; reproduce with
# ``llmsim.envs.routebalance_calibration.calibrate_quality``). About 11 % of the scores come out 0, as the paper's
# zero-safe lookup suggests many are.
QUALITY_SD = 0.30
QUALITY_RHO = 0.709
QUALITY_PRECLIP = {"qwen2.5-3b": 0.3262, "qwen2.5-7b": 0.3565, "qwen2.5-14b": 0.3862, "qwen2.5-72b": 0.3998}
# Topics: the paper's kNN beats chance (34.8 % vs 25 % best-model accuracy) because similar
# prompts favour the same model. Each dataset has TOPICS_PER_DATASET topics; a topic shifts the model-specific
# part of the quality: z_m = a * s[topic, m] + sqrt(1 - a^2) * e_m with s, e ~ N(0, 1), so z_m stays N(0, 1) and the
# per-tier means and the oracle keep their calibration (a = TOPIC_SIGNAL). A request carries a prompt embedding
# extra["embedding"] = centroid[topic] + EMBED_NOISE * N(0, I) (EMBED_DIM dims), the stand-in for MiniLM. Topic
# shifts and centroids are properties of the datasets (drawn from TOPIC_SEED, the same for every workload seed:
# a train split and a test split share them). TOPIC_SIGNAL and EMBED_NOISE are ASSUMED, chosen so that the kNN
# estimator (k = 10, 14,919 training requests) picks the best model on ~34 % of requests (docs/routebalance_testbed.md).
TOPICS_PER_DATASET = 8
EMBED_DIM = 8
TOPIC_SEED = 16
TOPIC_SIGNAL = 0.3
EMBED_NOISE = 0.7

# ------------------------------------------------------------------------------------------------ tasks
# (name, test-set count [the paper's table], mean prompt tokens, prompt sigma, mean output tokens, output sigma).
# Counts: the 3,634-prompt test file; the 3,534 served prompts are the subset with complete labels, which the
# spec does not break down, so the shares of the 3,634 are used. Prompt and output means are ASSUMPTIONS from
# each dataset's usual shape (Qwen chat template ~25 tokens included in prompts); the output level is scaled so
# that prompt + 3B output is ~270 tokens, i.e. the cost-priority cell's 1.67e-5 USD/request at 0.06 USD/1M
# (the paper: ~278 billed tokens if all on 3B; that cell serves mostly 3B, quality 0.354 vs always-3B 0.346).
DATASETS = (
    ("gsm8k", 510, 95.0, 0.35, 165.0, 0.5),
    ("squad", 585, 200.0, 0.40, 45.0, 0.8),
    ("beaver_tails", 601, 45.0, 0.50, 135.0, 0.7),
    ("mix_instruct", 585, 80.0, 0.70, 150.0, 0.8),
    ("code_ultra_feedback", 535, 150.0, 0.60, 285.0, 0.6),
    ("lmsys", 489, 110.0, 1.00, 210.0, 0.9),
    ("reward_bench", 329, 110.0, 0.80, 170.0, 0.8),
)
DATASET_COUNTS = {d[0]: d[1] for d in DATASETS}
PROMPT_MAX = MAX_MODEL_LEN - MAX_TOKENS  # a prompt always leaves room for max_tokens
RHO_LEN = 0.7  # ASSUMED: correlation of a prompt's log output length across the four models


def task_specs(models: Sequence[str] = MODELS) -> list[TaskSpec]:
    """One :class:`TaskSpec` per dataset; same per-tier quality and length model in every dataset (the spec
    gives no per-dataset numbers), output lengths capped at ``MAX_TOKENS``."""
    for m in models:
        if m not in TIER_QUALITY:
            raise ConfigError(f"routebalance: unknown model {m!r}; expected some of {list(MODELS)}")
    out = []
    for name, _, pm, ps, om, osig in DATASETS:
        out.append(TaskSpec(
            name, pm, ps, PROMPT_MAX,
            out_mean={m: om for m in models}, out_sigma={m: osig for m in models}, out_max=MAX_TOKENS,
            q_mean={m: QUALITY_PRECLIP[m] for m in models}, q_sd={m: QUALITY_SD for m in models},
            rho_quality=QUALITY_RHO, rho_len=RHO_LEN,
        ))
    return out


def dataset_counts(n: int = NUM_REQUESTS) -> dict[str, int]:
    """Requests per dataset for ``n`` requests: the test-set shares, largest remainder (sums to ``n``)."""
    total = sum(DATASET_COUNTS.values())
    raw = {k: n * v / total for k, v in DATASET_COUNTS.items()}
    counts = {k: int(math.floor(v)) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: (counts[k] - raw[k], k))[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


# ------------------------------------------------------------------------------------------------ arrivals
def gamma_arrivals(rng: np.random.Generator, rate: float, n: int, burstiness: float = 1.0) -> np.ndarray:
    """The paper's benchmark arrivals: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness))
    (burstiness 1 = Poisson, 0.3 = CV 1.83), cumulated and rescaled so that the last arrival is at n / rate."""
    if not (rate > 0 and math.isfinite(rate)):
        raise ConfigError(f"arrival.rate: expected a positive number, got {rate!r}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ConfigError(f"arrival.burstiness: expected a positive number, got {burstiness!r}")
    gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    return t * ((n / rate) / t[-1]) if n else t


def square_wave_arrivals(rng: np.random.Generator, lo: float, hi: float, n: int, start: str = "hi",
                         phase_s: float = 30.0) -> np.ndarray:
    """Square wave ``lo,hi`` (the paper's): alternating phases of hi*phase_s requests at hi req/s and lo*phase_s
    requests at lo req/s, ~phase_s seconds each, so the time-average rate is (lo + hi) / 2: 18 req/s for 6/30,
    the paper's "matched mean 18"). Poisson within a phase (ASSUMED); ``start``: which phase comes first (the
    spec does not say; ASSUMED hi)."""
    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"arrival.square: expected two positive rates, got {lo!r}, {hi!r}")
    if start not in ("hi", "lo"):
        raise ConfigError(f"arrival.start: expected 'hi' or 'lo', got {start!r}")
    phases = [(hi, max(1, round(hi * phase_s))), (lo, max(1, round(lo * phase_s)))]
    if start == "lo":
        phases.reverse()
    out = np.empty(n)
    t, k, p = 0.0, 0, 0
    while k < n:
        rate, count = phases[p % 2]
        m = min(count, n - k)
        out[k:k + m] = t + np.cumsum(rng.exponential(1.0 / rate, size=m))
        t = float(out[k + m - 1])
        k += m
        p += 1
    return out


def arrivals(rng: np.random.Generator, n: int, rate: float = 12.0, process: str = "poisson",
             burstiness: float = 0.3, square: tuple[float, float] = (6.0, 30.0), start: str = "hi") -> np.ndarray:
    """Arrival times for one cell: ``process`` = ``poisson`` (at ``rate``), ``gamma`` (``burstiness`` at
    ``rate``; the paper's bursty run is 0.3 at 18) or ``square`` (``square`` = (lo, hi); ``rate`` unused)."""
    if process == "poisson":
        return gamma_arrivals(rng, rate, n, 1.0)
    if process == "gamma":
        return gamma_arrivals(rng, rate, n, burstiness)
    if process == "square":
        return square_wave_arrivals(rng, float(square[0]), float(square[1]), n, start)
    raise ConfigError(f"arrival.process: expected 'poisson', 'gamma' or 'square', got {process!r}")


# ------------------------------------------------------------------------------------------------ builders
def routebalance_workload(rate: float = 12.0, n: int = NUM_REQUESTS, seed: int = SEED, process: str = "poisson",
                          burstiness: float = 0.3, square: tuple[float, float] = (6.0, 30.0), start: str = "hi",
                          models: Sequence[str] = MODELS, exact_means: bool = True,
                          topic_signal: float = TOPIC_SIGNAL) -> list[Request]:
    """``n`` requests (ids 0..n-1 in arrival order) with per-model output lengths (<= 1024) and qualities.

    Datasets get exactly their test-set share of ``n`` (``dataset_counts``) in a seeded random order; the same
    ``seed`` gives the same prompts, lengths and qualities at every rate and arrival process (only the arrival
    times differ), as replaying one test set at several rates does. ``exact_means`` (default): scale each
    model's qualities of this realisation by one factor (q -> min(1, s_m * q), zeros stay zeros) so that
    serving every request on model m scores exactly TIER_QUALITY[m] (the paper's always-3B 0.346 and
    always-14B 0.398 are properties of its fixed test set; without it a realisation is off by up to ~0.01).
    Every request carries ``max_tokens`` = 1024 (the paper's benchmark's) and a topic embedding
    (``extra["embedding"]``); with ``topic_signal`` > 0 its topic shifts the per-model qualities (see TOPIC_SIGNAL);
    ``topic_signal=0`` gives the pre-topic qualities of :class:`llmsim.envs.tasks.TaskSpec` (the workload of the
    first full results)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n: expected a positive integer, got {n!r}")
    models = list(models)
    rng_tasks = np.random.default_rng([seed, 0])
    rng_arr = np.random.default_rng([seed, 1])
    counts = dataset_counts(n)
    names = [d[0] for d in DATASETS]
    labels = np.repeat(np.arange(len(names)), [counts[k] for k in names])
    rng_tasks.shuffle(labels)
    times = arrivals(rng_arr, n, rate, process, burstiness, square, start)
    specs = task_specs(models)
    out: list[Request | None] = [None] * n
    for ti, spec in enumerate(specs):
        slots = np.flatnonzero(labels == ti)
        if not len(slots):
            continue
        mix = TaskMixture([spec], models, max_total=MAX_MODEL_LEN)
        for slot, r in zip(slots.tolist(), mix.sample(rng_tasks, times[slots])):
            out[slot] = Request(slot, r.arrival, r.prompt_tokens, r.output_tokens, task=r.task,
                                outputs_by_model=r.outputs_by_model, quality_by_model=r.quality_by_model,
                                extra={"dataset": r.task}, max_tokens=MAX_TOKENS)
    reqs = [r for r in out if r is not None]
    _add_topics(reqs, np.random.default_rng([seed, 2]), models, topic_signal)
    if exact_means:
        _match_means(reqs, models)
    return reqs


def topic_table() -> tuple[np.ndarray, np.ndarray]:
    """(shifts [dataset, topic, model of MODELS], centroids [dataset, topic, EMBED_DIM]), from TOPIC_SEED."""
    rng = np.random.default_rng(TOPIC_SEED)
    shape = (len(DATASETS), TOPICS_PER_DATASET)
    return rng.standard_normal((*shape, len(MODELS))), rng.standard_normal((*shape, EMBED_DIM))


def _add_topics(reqs: list[Request], rng: np.random.Generator, models: Sequence[str], signal: float) -> None:
    """Give each request a topic of its dataset and its embedding; with ``signal`` > 0 redraw its qualities
    from the topic model (TOPIC_SIGNAL), keeping the TaskSpec marginals (same pre-clip means, sd and rho)."""
    if not (0.0 <= signal <= 1.0):
        raise ConfigError(f"topic_signal: expected a number in [0, 1], got {signal!r}")
    shifts, centroids = topic_table()
    ds = {d[0]: k for k, d in enumerate(DATASETS)}
    n, nm = len(reqs), len(models)
    if not n:
        return
    topic = rng.integers(0, TOPICS_PER_DATASET, size=n)
    noise = rng.standard_normal((n, EMBED_DIM))
    z, e = rng.standard_normal(n), rng.standard_normal((n, nm))
    d = np.array([ds[str(r.task)] for r in reqs], dtype=np.int64)
    emb = np.round(centroids[d, topic] + EMBED_NOISE * noise, 4).tolist()
    for k, r in enumerate(reqs):
        r.extra = {**(r.extra or {}), "topic": int(topic[k]), "embedding": tuple(emb[k])}
    if signal > 0:
        cols = [MODELS.index(m) for m in models]
        zm = signal * shifts[d, topic][:, cols] + math.sqrt(1.0 - signal * signal) * e
        mu = np.array([QUALITY_PRECLIP[m] for m in models])
        bq = math.sqrt(1.0 - QUALITY_RHO * QUALITY_RHO)
        q = np.clip(mu + QUALITY_SD * (QUALITY_RHO * z[:, None] + bq * zm), 0.0, 1.0).tolist()
        for r, row in zip(reqs, q):
            r.quality_by_model = dict(zip(models, row))


def _match_means(reqs: list[Request], models: Sequence[str]) -> None:
    """Scale each model's quality column so that its mean is TIER_QUALITY[m] (bisection on the factor)."""
    for m in models:
        q = np.array([r.quality_by_model[m] for r in reqs])  # type: ignore[index]
        target = TIER_QUALITY[m]
        if q.mean() <= 0:
            continue
        lo, hi = 0.0, 4.0 * target / q.mean()
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if np.minimum(1.0, q * mid).mean() < target else (lo, mid)
        scaled = np.minimum(1.0, q * 0.5 * (lo + hi)).tolist()
        for r, v in zip(reqs, scaled):
            r.quality_by_model[m] = v  # type: ignore[index]


def routebalance_instances(max_model_len: int = MAX_MODEL_LEN, tiers: Sequence[Tier] = TIERS,
                           **engine: object) -> list[InstanceConfig]:
    """The 13 instances (28 GPUs) of the paper's setup, in tier order 72B, 14B, 7B, 3B; ``engine`` overrides other
    EngineConfig keys on every instance (e.g. ``max_num_seqs``). vLLM >= 0.6 defaults: whole-prompt prefill at
    max-model-len 8192 (policy vllm_v0), max_num_seqs 256. The 72B's enforce-eager is not modelled (see docs)."""
    out = []
    for t in tiers:
        eng = EngineConfig(max_model_len=max_model_len, gpu_memory_utilization=t.gpu_memory_utilization,
                           **engine)  # type: ignore[arg-type]
        out.extend(InstanceConfig(model=t.model, gpu=t.gpu, tp=t.tp, engine=eng) for _ in range(t.count))
    return out


def num_gpus(instances: Sequence[InstanceConfig]) -> int:
    return sum(int(i.tp) for i in instances)


def request_cost(r: Request, model: str, prices: dict[str, tuple[float, float]] = PRICES) -> float:
    """Realised cost in USD of serving ``r`` on ``model`` (the paper's per-token prices, in and out priced apart); the
    output stops at ``r.output_cap()`` (max_tokens, or a router's budget clamp), as the engine's does."""
    p_in, p_out = prices[model]
    out = r.output_for(model)
    cap = r.output_cap()
    if cap is not None:
        out = min(out, cap)
    return (r.prompt_tokens * p_in + out * p_out) / 1e6


def workload_summary(reqs: Sequence[Request], models: Sequence[str] = MODELS) -> dict[str, object]:
    """Calibration checks of a workload: dataset shares, per-tier mean quality / output, oracle, costs."""
    q = np.array([[r.quality_by_model[m] for m in models] for r in reqs])  # type: ignore[index]
    o = np.array([[r.outputs_by_model[m] for m in models] for r in reqs])  # type: ignore[index]
    p = np.array([r.prompt_tokens for r in reqs])
    tasks: dict[str, int] = {}
    for r in reqs:
        tasks[str(r.task)] = tasks.get(str(r.task), 0) + 1
    return {
        "n": len(reqs),
        "dataset_counts": tasks,
        "mean_quality": dict(zip(models, q.mean(0).round(4).tolist())),
        "oracle_quality": round(float(q.max(1).mean()), 4),
        "zero_quality_share": round(float((q == 0).mean()), 4),
        "mean_prompt": round(float(p.mean()), 1),
        "mean_output": dict(zip(models, o.mean(0).round(1).tolist())),
        "share_at_max_tokens": dict(zip(models, (o >= MAX_TOKENS).mean(0).round(4).tolist())),
        "cost_per_request_always": {m: round(float(np.mean([request_cost(r, m) for r in reqs])), 8) for m in models},
    }
