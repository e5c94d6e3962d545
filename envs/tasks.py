"""Task / quality models that generate per-request ground truth for the paper testbeds.

The simulator needs, per request, a prompt length and, per model, an output length and a quality.
The papers publish only aggregates, so each task is a small parametric model calibrated to them:

* prompt tokens ~ LogNormal with the task's mean and ``prompt_sigma`` (clipped),
* output tokens on model m ~ LogNormal with mean ``out_mean[m]`` and ``out_sigma[m]`` (clipped),
* quality on model m = clip(q_mean[m] + q_sd[m] * (rho * z_req + sqrt(1 - rho^2) * z_m), 0, 1):
  a shared per-request difficulty ``z_req`` makes the experts' qualities correlated (an easy prompt is
  easy for every model), the idiosyncratic ``z_m`` lets routing by quality matter.

Output lengths on different models share a per-request log-length factor with correlation ``rho_len``
(a prompt asking for a long answer gets long answers from every model). All randomness comes from one
``numpy.random.Generator`` seeded by the caller, so a seed fixes a workload realisation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from llmsim.request import Request


@dataclass
class TaskSpec:
    """One task: prompt-length model plus per-model output-length and quality models."""

    name: str
    prompt_mean: float
    prompt_sigma: float = 0.5
    prompt_max: int = 1000
    out_mean: dict[str, float] = field(default_factory=dict)
    out_sigma: dict[str, float] = field(default_factory=dict)
    out_max: int = 4096
    q_mean: dict[str, float] = field(default_factory=dict)
    q_sd: dict[str, float] = field(default_factory=dict)
    rho_quality: float = 0.6
    rho_len: float = 0.8


def _lognormal(mean: float, sigma: float, z: np.ndarray) -> np.ndarray:
    """LogNormal with the given *mean* (not median) from standard-normal draws ``z``."""
    mu = math.log(max(mean, 1e-9)) - 0.5 * sigma * sigma
    return np.exp(mu + sigma * z)


@dataclass
class TaskMixture:
    """Weighted mixture of tasks over a fixed list of models; draws :class:`Request` batches."""

    tasks: list[TaskSpec]
    models: list[str]
    weights: list[float] | None = None
    max_total: int | None = None  # prompt + output cap (the model's context window)

    def probs(self) -> np.ndarray:
        w = np.ones(len(self.tasks)) if self.weights is None else np.asarray(self.weights, dtype=float)
        return w / w.sum()

    def sample(self, rng: np.random.Generator, arrivals: np.ndarray, first_id: int = 0) -> list[Request]:
        """One request per arrival time, tasks drawn i.i.d. from the mixture (vectorised per task)."""
        n = len(arrivals)
        nm = len(self.models)
        task_idx = rng.choice(len(self.tasks), size=n, p=self.probs())
        z_p = rng.standard_normal(n)
        z_len = rng.standard_normal(n)
        z_q = rng.standard_normal(n)
        z_len_m = rng.standard_normal((n, nm))
        z_q_m = rng.standard_normal((n, nm))
        prompt = np.empty(n, dtype=np.int64)
        outs = np.empty((n, nm), dtype=np.int64)
        quals = np.full((n, nm), np.nan)
        for ti, t in enumerate(self.tasks):
            sel = np.flatnonzero(task_idx == ti)
            if not len(sel):
                continue
            p = np.rint(_lognormal(t.prompt_mean, t.prompt_sigma, z_p[sel]))
            p = np.clip(p, 1, t.prompt_max).astype(np.int64)
            prompt[sel] = p
            cap = np.full(len(sel), t.out_max)
            if self.max_total is not None:
                cap = np.minimum(cap, self.max_total - p - 1)
            cap = np.maximum(cap, 1)
            a, aq = t.rho_len, t.rho_quality
            b, bq = math.sqrt(max(0.0, 1.0 - a * a)), math.sqrt(max(0.0, 1.0 - aq * aq))
            first_mean = next(iter(t.out_mean.values()))
            first_sig = next(iter(t.out_sigma.values()))
            for j, m in enumerate(self.models):
                zl = a * z_len[sel] + b * z_len_m[sel, j]
                o = _lognormal(t.out_mean.get(m, first_mean), t.out_sigma.get(m, first_sig), zl)
                outs[sel, j] = np.clip(np.rint(o), 1, cap).astype(np.int64)
                if t.q_mean:
                    zq = aq * z_q[sel] + bq * z_q_m[sel, j]
                    quals[sel, j] = np.clip(t.q_mean.get(m, 0.0) + t.q_sd.get(m, 0.0) * zq, 0.0, 1.0)
        names = [t.name for t in self.tasks]
        models = self.models
        has_q = bool(self.tasks[0].q_mean)
        out_l = outs.tolist()
        q_l = quals.tolist()
        arr = np.asarray(arrivals, dtype=np.float64).tolist()
        reqs = []
        for k in range(n):
            o = out_l[k]
            reqs.append(Request(first_id + k, arr[k], int(prompt[k]), o[0], task=names[task_idx[k]],
                                outputs_by_model=dict(zip(models, o)) if nm > 1 else None,
                                quality_by_model=dict(zip(models, q_l[k])) if has_q else None))
        return reqs


# ---------------------------------------------------------------------------- calibrated presets
# Spec 001, Table 1 (Llama-2-7B responses; prompts <= 1000 tokens). Mean prompt/decode tokens are the
# table's; the decode sigma is fitted so that P(decode > 120 tokens) equals the table's "heavy decode
# (> 5 s)" share (120 tokens ~ 5 s at the ~24 tokens/s a sequence gets in a loaded V100 batch).
WORKLOAD_ROUTER_TASKS = (
    ("translation", 29.09, 61.76, 0.66),
    ("qna", 29.83, 334.40, 1.23),
    ("sentiment", 211.54, 142.53, 0.85),
    ("in_context_qna", 125.16, 220.02, 1.15),
    ("entity_recognition", 26.41, 64.10, 0.58),
)
WORKLOAD_ROUTER_WEIGHTS = (7351, 6988, 6564, 7122, 3304)  # Table 1 sample counts: uniform over the dataset


def workload_router_mixture(model: str = "llama-2-7b") -> TaskMixture:
    """The five-task mixture of spec 001 (Table 1), one model."""
    tasks = [TaskSpec(n, pm, 0.5, 1000, {model: dm}, {model: s}, 4095)
             for n, pm, dm, s in WORKLOAD_ROUTER_TASKS]
    return TaskMixture(tasks, [model], list(WORKLOAD_ROUTER_WEIGHTS), max_total=4096)


# Spec 002, Table 1: zero-shot accuracy normalised by OPT-6.7B's. Request shapes are not given by the
# paper (choice): prompt means from the datasets' typical zero-shot prompt lengths (context + choices),
# a short generated answer (mean 32 tokens, sigma 0.5) identical in distribution across sizes.
BEST_EFFORT_MODELS = ("opt-125m", "opt-1.3b", "opt-6.7b")
BEST_EFFORT_ACCURACY = {
    "hellaswag": (0.45, 0.78, 1.00),
    "copa": (0.80, 0.95, 1.00),
    "piqa": (0.82, 0.96, 1.00),
    "openbookqa": (0.70, 0.94, 1.00),
}
BEST_EFFORT_PROMPTS = {"hellaswag": 110.0, "copa": 22.0, "piqa": 45.0, "openbookqa": 35.0}


def best_effort_mixture(tasks: Sequence[str] | None = None, out_mean: float = 32.0) -> TaskMixture:
    """Spec 002's four tasks (uniform mix by default); quality = the normalised accuracy (no noise)."""
    names = list(tasks or BEST_EFFORT_ACCURACY)
    specs = []
    for n in names:
        acc = BEST_EFFORT_ACCURACY[n]
        specs.append(TaskSpec(n, BEST_EFFORT_PROMPTS[n], 0.4, 512,
                              {m: out_mean for m in BEST_EFFORT_MODELS}, {m: 0.5 for m in BEST_EFFORT_MODELS},
                              256, dict(zip(BEST_EFFORT_MODELS, acc)), {m: 0.0 for m in BEST_EFFORT_MODELS},
                              rho_len=1.0))
    return TaskMixture(specs, list(BEST_EFFORT_MODELS), max_total=2048)


# Spec 000: the six mix-instruct experts of the released code. Mean BERTScore from the LLM-Blender
# PairRanker card (spec 000 Sec. 3); mpt-7b-instruct writes longer, narrower answers (Fig. 4b). Outputs
# are capped at 300 tokens (paper). The quality sd (0.06) and length sigmas are choices.
QOS_EXPERTS = ("alpaca-native", "chatglm-6b", "mpt-7b-instruct", "koala-7b", "baize-7b", "mpt-7b")
QOS_QUALITY = {"alpaca-native": 0.7146, "chatglm-6b": 0.7038, "mpt-7b-instruct": 0.6321, "koala-7b": 0.6396,
               "baize-7b": 0.6557, "mpt-7b": 0.6321}
QOS_OUT_MEAN = {"alpaca-native": 110.0, "chatglm-6b": 130.0, "mpt-7b-instruct": 180.0, "koala-7b": 120.0,
                "baize-7b": 100.0, "mpt-7b": 140.0}
QOS_OUT_SIGMA = {"alpaca-native": 0.8, "chatglm-6b": 0.8, "mpt-7b-instruct": 0.45, "koala-7b": 0.8,
                 "baize-7b": 0.8, "mpt-7b": 0.9}


def qos_edge_mixture(experts: Sequence[str] = QOS_EXPERTS) -> TaskMixture:
    """One mix-instruct task over the given experts (spec 000)."""
    ex = list(experts)
    t = TaskSpec("mix-instruct", 80.0, 0.9, 1024, {m: QOS_OUT_MEAN.get(m, 130.0) for m in ex},
                 {m: QOS_OUT_SIGMA.get(m, 0.8) for m in ex}, 300,
                 {m: QOS_QUALITY.get(m, 0.65) for m in ex}, {m: 0.06 for m in ex},
                 rho_quality=0.6, rho_len=0.5)
    return TaskMixture([t], ex, max_total=2048)


# ---------------------------------------------------------------------------- arrivals
def poisson_arrivals(rng: np.random.Generator, rate: float, n: int, start: float = 0.0) -> np.ndarray:
    return start + np.cumsum(rng.exponential(1.0 / rate, size=n))


def phased_arrivals(rng: np.random.Generator, n: int, draw_rate, mean_len) -> tuple[np.ndarray, np.ndarray]:
    """Markov-modulated Poisson: each phase draws a rate and a Geometric number of requests.

    Returns arrival times and the true rate in force at each arrival.
    """
    times = np.empty(n)
    rates = np.empty(n)
    t = 0.0
    k = 0
    while k < n:
        rate = float(draw_rate(rng))
        m = int(rng.geometric(1.0 / max(1.0, mean_len(rate))))
        m = min(m, n - k)
        gaps = rng.exponential(1.0 / rate, size=m)
        times[k:k + m] = t + np.cumsum(gaps)
        rates[k:k + m] = rate
        t = times[k + m - 1]
        k += m
    return times, rates


def best_effort_arrivals(rng: np.random.Generator, schedule: str, n: int,
                         rate: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Spec 002 App. B schedules: ``stable`` (Poisson at ``rate``, or a random rate in [0.25, 48] held
    for 40 s phases), ``bursty`` (unpredictable workload 1) and ``bursty2`` (unpredictable workload 2)."""
    if schedule == "stable":
        if rate is not None:
            return poisson_arrivals(rng, rate, n), np.full(n, float(rate))
        return phased_arrivals(rng, n, lambda g: g.uniform(0.25, 48.0), lambda r: 40.0 * r)
    if schedule == "bursty":
        def draw(g: np.random.Generator) -> float:
            u = g.random()
            if u < 0.90:
                return g.uniform(0.25, 2.0)
            if u < 0.98:
                return g.uniform(2.0, 40.0)
            return g.uniform(40.0, 48.0)
        return phased_arrivals(rng, n, draw, lambda r: 20.0 * r)
    if schedule == "bursty2":
        return phased_arrivals(rng, n, lambda g: g.uniform(1.0, 48.0), lambda r: 500.0)
    raise ValueError(f"unknown arrival schedule {schedule!r}; expected stable, bursty or bursty2")


# ---------------------------------------------------------------------------- user-labelled data
@dataclass
class LabelledPool:
    """Requests sampled from a user table of request x model -> output tokens, quality.

    Long format, one row per (request, model): columns ``request_id``, ``model``, ``prompt_tokens``,
    ``output_tokens`` and optionally ``quality`` and ``task``. CSV or Parquet.
    """

    prompt: np.ndarray
    outputs: np.ndarray  # (n_requests, n_models) int
    quality: np.ndarray  # (n_requests, n_models) float (nan = unknown)
    tasks: list[str | None]
    models: list[str]

    @classmethod
    def load(cls, path: str | Path) -> LabelledPool:
        import pandas as pd

        p = Path(path)
        df = pd.read_parquet(p) if p.suffix in (".parquet", ".pq") else pd.read_csv(p)
        need = {"request_id", "model", "prompt_tokens", "output_tokens"}
        if missing := need - set(df.columns):
            raise ValueError(f"{p}: labelled data needs columns {sorted(need)}; missing {sorted(missing)}")
        models = sorted(df["model"].astype(str).unique())
        out = df.pivot(index="request_id", columns="model", values="output_tokens")[models]
        ids = out.index
        qual = (df.pivot(index="request_id", columns="model", values="quality")[models].loc[ids]
                if "quality" in df.columns else out * np.nan)
        first = df.groupby("request_id").first().loc[ids]
        tasks = list(first["task"].astype(str)) if "task" in df.columns else [None] * len(ids)
        return cls(first["prompt_tokens"].to_numpy(int), out.fillna(1).to_numpy(int),
                   qual.to_numpy(float), tasks, models)

    def sample(self, rng: np.random.Generator, arrivals: np.ndarray, first_id: int = 0) -> list[Request]:
        idx = rng.integers(len(self.prompt), size=len(arrivals))
        out = []
        for k, i in enumerate(idx):
            outs = {m: int(self.outputs[i, j]) for j, m in enumerate(self.models)}
            q = {m: float(self.quality[i, j]) for j, m in enumerate(self.models)
                 if not np.isnan(self.quality[i, j])}
            out.append(Request(first_id + k, float(arrivals[k]), int(self.prompt[i]), outs[self.models[0]],
                               task=self.tasks[i], outputs_by_model=outs, quality_by_model=q or None))
        return out


def iter_requests(reqs: list[Request]) -> Iterator[Request]:
    return iter(reqs)
