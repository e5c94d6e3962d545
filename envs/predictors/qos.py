"""The QoS-aware edge router paper's quality-score and output-length bucket predictors (Sec. V-B1, Table II).

Trained on the QoSEdge env's workload.

The paper fine-tunes two DistilBERT classifiers (10 equal buckets each) on the request text with the expert as an
input token; top-1 / top-3 accuracy 63.39 / 97.78 % (score) and 72.97 / 84.71 % (length). Our requests carry no
text, so each target gets ONE xgboost classifier over what a router sees before routing: the prompt length, the
task (when the workload has several) and the expert (one-hot), like the paper's ``<extra_token_n>``.

* Buckets: the paper's width (max generation score) / 10 over [0, max], max = 1.0 (BERTScore's bound) by default
  or the training set's maximum (``score_max="observed"``); lengths 30 tokens wide over [0, 300] (the cap).
* :func:`train_qos_predictor` samples (request, expert) pairs from ``qos_edge_mixture(experts)``, splits them
  80:20 by request, fits both classifiers and reports top-1 / top-3 next to the paper, the majority baselines
  and :func:`ceiling` (the best any classifier of these features can do under the stand-in task model).
* :class:`QoSBucketPredictor` is the env ``Predictor`` (bucket midpoints for lengths and qualities).

Saved as JSON plus one xgboost UBJ file per target; loading parses those two formats only (nothing is unpickled).
The sha256 recorded in the JSON finds a model file from another save; it proves nothing of who wrote the files.

CLI: ``python -m llmsim.envs.predictors.qos [--samples N] [--seed S] [--experts a,b] [--out DIR] [--json]``.
See docs/predictors.md, "QoS-aware edge router predictors".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.envs.exported import file_sha256
from llmsim.envs.predictors.base import Predictor
from llmsim.envs.predictors.reports import print_report
from llmsim.envs.predictors.saved import is_model_file_name, load_xgboost, read_json
from llmsim.envs.tasks import QOS_EXPERTS, TaskMixture, qos_edge_mixture
from llmsim.envs.workloads import MixtureWorkload
from llmsim.errors import ConfigError
from llmsim.request import Request

FORMAT = "llmsim-qos-bucket-predictor"
VERSION = 1
N_BUCKETS = 10
LEN_MAX = 300.0  # the paper caps outputs at 300 tokens, so length buckets are 30 tokens wide
TARGETS = ("quality", "output_tokens")
PAPER = {"quality": (0.6339, 0.9778), "output_tokens": (0.7297, 0.8471)}  # the paper's top-1, top-3
DEFAULT_SAMPLES = 10000  # requests; each gives one (request, expert) pair per expert
GRID_MAX = 2048  # prompts 0..GRID_MAX are predicted in one batched call per task
DEFAULT_FILE = "qos_predictor.json"


# ---------------------------------------------------------------------------- buckets, samples, features
def bucket_index(values: Any, vmax: float) -> np.ndarray:
    """Equal buckets of width vmax / 10 over [0, vmax], half-open; vmax and above go to the last bucket."""
    v = np.asarray(values, dtype=np.float64)
    return np.clip(np.floor(v / (vmax / N_BUCKETS) + 1e-9), 0, N_BUCKETS - 1).astype(np.int64)


def midpoints(vmax: float) -> np.ndarray:
    return (np.arange(N_BUCKETS) + 0.5) * (vmax / N_BUCKETS)


def collect_pairs(experts: Sequence[str], n_requests: int, seed: int) -> pd.DataFrame:
    """One row per (request, expert) of ``n_requests`` QoSEdge requests (the env's workload, seed ``seed``)."""
    if isinstance(n_requests, bool) or not isinstance(n_requests, int) or n_requests < 10:
        raise ConfigError(f"samples: expected an integer >= 10 (requests), got {n_requests!r}")
    ex = list(experts)
    reqs = MixtureWorkload(qos_edge_mixture(ex), {"kind": "poisson", "rate": 5.0}).requests(seed, n_requests)
    rows = [(r.id, str(r.task), r.prompt_tokens, m, r.output_for(m), (r.quality_by_model or {}).get(m, 0.0))
            for r in reqs for m in ex]
    return pd.DataFrame(rows, columns=["request", "task", "prompt_tokens", "expert", "output_tokens", "quality"])


def split_requests(df: pd.DataFrame, seed: int, test_frac: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80:20 split by request (a test prompt is never seen in training with another expert)."""
    ids = np.unique(df["request"].to_numpy())
    test_ids = np.random.default_rng(seed).permutation(ids)[:max(1, int(round(test_frac * len(ids))))]
    test = df["request"].isin(test_ids).to_numpy()
    return df[~test].reset_index(drop=True), df[test].reset_index(drop=True)


def feature_names(experts: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """prompt_tokens, a one-hot of the expert, and a one-hot of the task only when there are several tasks."""
    return ["prompt_tokens"] + [f"expert={m}" for m in experts] + ([f"task={t}" for t in tasks] if len(tasks) > 1
                                                                    else [])


def feature_matrix(experts: Sequence[str], tasks: Sequence[str], expert_col: Sequence[str],
                   task_col: Sequence[str], prompts: Any) -> np.ndarray:
    n, ne = len(expert_col), len(experts)
    x = np.zeros((n, len(feature_names(experts, tasks))), dtype=np.float32)
    x[:, 0] = np.asarray(prompts, dtype=np.float32)
    ei = {m: i for i, m in enumerate(experts)}
    rows = np.arange(n)
    cols = np.array([1 + ei[m] for m in expert_col], dtype=np.int64)
    x[rows, cols] = 1.0
    if len(tasks) > 1:  # an unseen task stays all zeros
        ti = {t: 1 + ne + i for i, t in enumerate(tasks)}
        for r, t in enumerate(task_col):
            if t in ti:
                x[r, ti[t]] = 1.0
    return x


# ---------------------------------------------------------------------------- the classifiers
def _xgb(seed: int) -> Any:
    try:
        from xgboost import XGBClassifier  # optional: the predict extra
    except ImportError as e:
        raise ConfigError(f"learned_qos predictor needs xgboost (pip install -e '.[predict]'): {e}") from None
    return XGBClassifier(n_estimators=60, max_depth=3, learning_rate=0.1, tree_method="hist", random_state=seed,
                         n_jobs=1, verbosity=0)


@dataclass
class TargetModel:
    """One multi-class classifier over the buckets seen in training (``classes``); "constant" if only one."""

    kind: str
    classes: list[int]
    model: Any = None

    @classmethod
    def fit(cls, x: np.ndarray, buckets: np.ndarray, seed: int) -> TargetModel:
        classes = sorted(int(b) for b in np.unique(buckets))
        if len(classes) == 1:
            return cls("constant", classes)
        clf = _xgb(seed)
        clf.fit(x, np.searchsorted(classes, buckets))  # contiguous labels 0..k-1, as xgboost requires
        return cls("xgboost", classes, clf)

    def proba(self, x: np.ndarray) -> np.ndarray:
        """(n, 10) bucket probabilities (zero for buckets never seen in training)."""
        out = np.zeros((len(x), N_BUCKETS))
        if self.kind == "constant":
            out[:, self.classes[0]] = 1.0
        else:
            out[:, self.classes] = np.asarray(self.model.predict_proba(x)).reshape(len(x), len(self.classes))
        return out


@dataclass
class QoSBucketModel:
    """Both fitted classifiers with the expert / task vocabularies and the bucket ranges."""

    experts: list[str]
    tasks: list[str]
    score_max: float
    targets: dict[str, TargetModel]
    seed: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def features(self) -> list[str]:
        return feature_names(self.experts, self.tasks)

    def vmax(self, target: str) -> float:
        return self.score_max if target == "quality" else LEN_MAX

    @classmethod
    def fit(cls, train: pd.DataFrame, experts: Sequence[str], seed: int = 0,
            score_max: float | str = 1.0) -> QoSBucketModel:
        ok = score_max == "observed" or isinstance(score_max, int | float) and not isinstance(score_max, bool)
        smax = float(train["quality"].max()) if score_max == "observed" else float(score_max) if ok else math.nan
        if not math.isfinite(smax) or smax <= 0:
            raise ConfigError(f"score_max: expected a positive number or 'observed', got {score_max!r}")
        tasks = sorted(set(train["task"]))
        x = feature_matrix(list(experts), tasks, train["expert"].tolist(), train["task"].tolist(),
                           train["prompt_tokens"].to_numpy())
        targets = {t: TargetModel.fit(x, bucket_index(train[t].to_numpy(), smax if t == "quality" else LEN_MAX),
                                      seed) for t in TARGETS}
        return cls(list(experts), tasks, smax, targets, seed, {"n_train_pairs": len(train)})

    def proba(self, target: str, expert_col: Sequence[str], task_col: Sequence[str], prompts: Any) -> np.ndarray:
        return self.targets[target].proba(feature_matrix(self.experts, self.tasks, expert_col, task_col, prompts))

    def proba_frame(self, target: str, df: pd.DataFrame) -> np.ndarray:
        return self.proba(target, df["expert"].tolist(), df["task"].tolist(), df["prompt_tokens"].to_numpy())

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> list[Path]:
        """``path`` (a .json, or a directory that gets qos_predictor.json) plus one ``<stem>.<target>.ubj``
        xgboost file per fitted target beside it. Returns the files written."""
        p = resolve_path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        written, tmeta = [], {}
        for name, tm in self.targets.items():
            tmeta[name] = {"kind": tm.kind, "classes": tm.classes, "edges": _edges(self.vmax(name))}
            if tm.kind == "xgboost":
                mp = p.with_name(f"{p.stem}.{name}.ubj")
                tm.model.save_model(str(mp))
                tmeta[name].update(model_file=mp.name, model_sha256=file_sha256(mp))
                written.append(mp)
        meta = {"format": FORMAT, "version": VERSION, "experts": self.experts, "tasks": self.tasks,
                "features": self.features, "score_max": self.score_max, "len_max": LEN_MAX,
                "n_buckets": N_BUCKETS, "targets": tmeta, "seed": self.seed, "info": self.info}
        p.write_text(json.dumps(meta, indent=1) + "\n")
        return [p, *written]

    @classmethod
    def load(cls, path: str | Path, experts: Sequence[str] | None = None) -> QoSBucketModel:
        """The predictor saved at ``path``; another format, a changed model file or (with ``experts``) a file
        trained for other experts is refused with one ConfigError line naming the file."""
        p = resolve_path(path)
        meta = _read_meta(p)
        if experts is not None and sorted(experts) != sorted(meta["experts"]):
            raise ConfigError(f"{p}: trained for experts {meta['experts']}, not for {list(experts)}; "
                              f"train one for them (python -m llmsim.envs.predictors.qos --experts ... --out DIR)")
        targets = {}
        for name in TARGETS:
            tm = meta["targets"][name]
            model = (None if tm["kind"] == "constant"
                     else load_xgboost(p, tm["model_file"], tm.get("model_sha256"), lambda: _xgb(0)))
            targets[name] = TargetModel(tm["kind"], tm["classes"], model)
        m = cls(meta["experts"], meta["tasks"], float(meta["score_max"]), targets, int(meta.get("seed", 0)),
                dict(meta.get("info") or {}))
        try:  # a model file of another shape fails here, not mid-episode
            for name in TARGETS:
                m.proba(name, m.experts[:1], m.tasks[:1], [10])
        except Exception as e:  # noqa: BLE001 - any library error means the file does not fit
            raise ConfigError(f"{p}: model file does not fit the predictor's {len(m.features)} features: "
                              f"{' '.join(str(e).split())[:300]}") from None
        return m


def resolve_path(path: str | Path) -> Path:
    p = Path(path)
    return p / DEFAULT_FILE if p.is_dir() or p.suffix != ".json" else p


def saved_files(path: str | Path) -> list[Path]:
    """The files of the predictor saved at ``path``: the .json and the model files it names (checked as by load)."""
    p = resolve_path(path)
    return [p, *(p.with_name(tm["model_file"]) for tm in _read_meta(p)["targets"].values() if tm["kind"] == "xgboost")]


def _edges(vmax: float) -> list[float]:
    return [round(vmax * i / N_BUCKETS, 10) for i in range(N_BUCKETS + 1)]


def _read_meta(p: Path) -> dict[str, Any]:
    """The JSON of a saved predictor, checked (one ConfigError line naming the file and what was expected)."""
    meta = read_json(p, "the .json written by `python -m llmsim.envs.predictors.qos --out DIR`")
    bad = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        bad = f"format {FORMAT!r} version {VERSION}"
    elif not (isinstance(meta.get("experts"), list) and meta["experts"] and isinstance(meta.get("tasks"), list)
              and meta["tasks"] and meta.get("features") == feature_names(meta["experts"], meta["tasks"])):
        bad = "experts, tasks and the matching feature names"
    elif not (isinstance(meta.get("score_max"), int | float) and meta["score_max"] > 0
              and meta.get("len_max") == LEN_MAX and meta.get("n_buckets") == N_BUCKETS):
        bad = f"score_max > 0, len_max {LEN_MAX}, n_buckets {N_BUCKETS}"
    else:
        for name in TARGETS:
            tm = (meta.get("targets") or {}).get(name)
            if not (isinstance(tm, dict) and tm.get("kind") in ("xgboost", "constant")
                    and isinstance(tm.get("classes"), list) and tm["classes"] == sorted(set(tm["classes"]))
                    and all(isinstance(c, int) and 0 <= c < N_BUCKETS for c in tm["classes"])
                    and (tm["kind"] == "xgboost") == (len(tm["classes"]) > 1)
                    and (tm["kind"] == "constant" or is_model_file_name(tm.get("model_file")))):
                bad = (f"targets.{name}: kind, sorted classes in 0..{N_BUCKETS - 1} and a model_file beside it "
                       "(an xgboost .ubj or .json)")
                break
    if bad:
        raise ConfigError(f"{p}: not a valid {FORMAT} file: expected {bad}")
    return meta


# ---------------------------------------------------------------------------- the env predictor
class QoSBucketPredictor(Predictor):
    """Bucket-midpoint output length and quality of each model, from a :class:`QoSBucketModel` (the top-1
    bucket). A pure function of (task, prompt tokens, expert): on a task's first request the prompts
    0..GRID_MAX are predicted in one batched call; later requests cost an array lookup (no cache needed)."""

    def __init__(self, model: QoSBucketModel | str | Path, experts: Sequence[str] | None = None) -> None:
        self.source = str(resolve_path(model)) if not isinstance(model, QoSBucketModel) else "<in-memory predictor>"
        self.model = model if isinstance(model, QoSBucketModel) else QoSBucketModel.load(model, experts)
        self.mids = {t: midpoints(self.model.vmax(t)) for t in TARGETS}
        self.grids: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # task -> (lengths, qualities) [prompt, expert]
        self.index: dict[tuple[str, ...], np.ndarray] = {}

    def _table(self, task: str, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ex = self.model.experts
        n, ne = len(prompts), len(ex)
        cols = [np.repeat(prompts, ne), ex * n, [task] * (n * ne)]
        out = []
        for t in TARGETS:
            b = np.argmax(self.model.proba(t, cols[1], cols[2], cols[0]), axis=1)
            out.append(self.mids[t][b].reshape(n, ne))
        return out[1], out[0]

    def _columns(self, models: Sequence[str]) -> np.ndarray:
        key = tuple(models)
        idx = self.index.get(key)
        if idx is None:
            if sorted(set(key)) != sorted(self.model.experts):
                raise ConfigError(f"{self.source}: trained for experts {self.model.experts}, the env routes to "
                                  f"{list(key)}; train one for them "
                                  "(python -m llmsim.envs.predictors.qos --experts ...)")
            pos = {m: i for i, m in enumerate(self.model.experts)}
            idx = self.index[key] = np.array([pos[m] for m in key], dtype=np.int64)
        return idx

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        idx = self._columns(models)
        task = str(req.task)
        p = int(req.prompt_tokens)
        if 0 <= p <= GRID_MAX:
            grid = self.grids.get(task)
            if grid is None:
                grid = self.grids[task] = self._table(task, np.arange(GRID_MAX + 1))
            return grid[0][p, idx], grid[1][p, idx]
        lens, quals = self._table(task, np.array([p]))  # off the grid (not in QoSEdge): one model call
        return lens[0, idx], quals[0, idx]


# ---------------------------------------------------------------------------- evaluation
def topk(proba: np.ndarray, y: np.ndarray, k: int) -> float:
    """Share of rows whose true bucket is among the k most probable (ties to the lower bucket)."""
    order = np.argsort(-proba, axis=1, kind="stable")[:, :k]
    return float((order == y[:, None]).any(axis=1).mean())


def _freq_proba(train_b: np.ndarray, train_key: np.ndarray, test_key: np.ndarray) -> np.ndarray:
    """Training bucket frequencies per key (expert, or one global key), as a test-set 'probability'."""
    out = np.zeros((len(test_key), N_BUCKETS))
    for key in np.unique(test_key):
        counts = np.bincount(train_b[train_key == key], minlength=N_BUCKETS)
        out[test_key == key] = counts / max(1, counts.sum())
    return out


def ceiling(mixture: TaskMixture, experts: Sequence[str], target: str, vmax: float, k: int,
            shared: bool = False) -> float | None:
    """Best expected top-k accuracy of any classifier under the stand-in task model (numerical, not sampled).

    ``shared=False``: features (task, prompt tokens, expert). In llmsim.envs.tasks the quality and the length draws are
    independent of the prompt (the 2,048-token context never cuts a 300-token output), so the per-(task, expert)
    bucket distribution is all a classifier can know. ``shared=True``: as if the request's shared latent factor
    (z_q, z_len: what a text model might read) were visible too. None if the cap assumption fails."""
    z = np.linspace(-8.0, 8.0, 1601) if shared else np.zeros(1)
    w = np.exp(-0.5 * z * z)
    w /= w.sum()
    erf = np.vectorize(math.erf)
    total = 0.0
    for t, pt in zip(mixture.tasks, mixture.probs()):
        cap = t.out_max if mixture.max_total is None else min(t.out_max, mixture.max_total - t.prompt_max - 1)
        if target == "output_tokens" and cap < LEN_MAX:
            return None
        acc = 0.0
        for m in experts:
            if target == "quality":
                loc, scale, rho = t.q_mean.get(m, 0.0), t.q_sd.get(m, 0.0), t.rho_quality
                cuts = np.asarray(_edges(vmax)[1:-1])
            else:
                sig = t.out_sigma.get(m, next(iter(t.out_sigma.values())))
                loc = math.log(t.out_mean.get(m, next(iter(t.out_mean.values())))) - 0.5 * sig * sig
                scale, rho = sig, t.rho_len
                cuts = np.log(np.asarray(_edges(LEN_MAX)[1:-1]) - 0.5)  # integer lengths: rint(x) >= e <=> x >= e - .5
            r = rho if shared else 0.0
            sd = max(scale * math.sqrt(max(0.0, 1.0 - r * r)), 1e-12)
            cdf = 0.5 * (1.0 + erf((cuts[None, :] - (loc + scale * r * z)[:, None]) / (sd * math.sqrt(2.0))))
            p = np.diff(np.hstack([np.zeros((len(z), 1)), cdf, np.ones((len(z), 1))]), axis=1)
            acc += float(w @ np.sort(p, axis=1)[:, -k:].sum(axis=1))
        total += pt * acc / len(experts)
    return total


def evaluate(model: QoSBucketModel, train: pd.DataFrame, test: pd.DataFrame) -> dict[str, Any]:
    """Top-1 / top-3 per target and per expert, next to the paper, the majority baselines and the ceilings."""
    mix = qos_edge_mixture(model.experts)
    out: dict[str, Any] = {}
    for t in TARGETS:
        vmax = model.vmax(t)
        y, yt = bucket_index(test[t].to_numpy(), vmax), bucket_index(train[t].to_numpy(), vmax)
        ex, ext = test["expert"].to_numpy(), train["expert"].to_numpy()
        probs = {"model": model.proba_frame(t, test), "majority_expert": _freq_proba(yt, ext, ex),
                 "majority_global": _freq_proba(yt, np.zeros(len(yt)), np.zeros(len(y)))}
        r = {f"{name}_top{k}": topk(pr, y, k) for name, pr in probs.items() for k in (1, 3)}
        for k in (1, 3):
            r[f"ceiling_top{k}"] = ceiling(mix, model.experts, t, vmax, k)
            r[f"ceiling_shared_top{k}"] = ceiling(mix, model.experts, t, vmax, k, shared=True)
        r.update(paper_top1=PAPER[t][0], paper_top3=PAPER[t][1], oracle_top1=1.0, oracle_top3=1.0,
                 edges=_edges(vmax), test_buckets=np.bincount(y, minlength=N_BUCKETS).tolist())
        r["per_expert"] = [{"expert": m, "model_top1": topk(probs["model"][ex == m], y[ex == m], 1),
                            "majority_expert_top1": topk(probs["majority_expert"][ex == m], y[ex == m], 1)}
                           for m in model.experts]
        out[t] = r
    return out


def train_qos_predictor(experts: Sequence[str] = QOS_EXPERTS, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                        score_max: float | str = 1.0) -> tuple[QoSBucketModel, dict[str, Any]]:
    """Draw ``samples`` requests (x experts pairs), split 80:20 by request, fit both targets, evaluate."""
    ex = list(experts)
    if not ex or len(set(ex)) != len(ex) or not all(isinstance(m, str) and m for m in ex):
        raise ConfigError(f"experts: expected a non-empty list of distinct names, got {ex!r}")
    train, test = split_requests(collect_pairs(ex, samples, seed), seed)
    t0 = time.perf_counter()
    model = QoSBucketModel.fit(train, ex, seed, score_max)
    report: dict[str, Any] = {"experts": ex, "seed": seed, "samples": samples, "score_max": model.score_max,
                              "n_train_pairs": len(train), "n_test_pairs": len(test),
                              "fit_seconds": round(time.perf_counter() - t0, 3), "features": model.features}
    report["targets"] = evaluate(model, train, test)
    return model, report


def time_predict(pred: QoSBucketPredictor, reqs: Sequence[Request], models: Sequence[str]) -> dict[str, float]:
    """The first call (it builds the task's grid) in ms, then the mean warm call over ``reqs`` in us."""
    t0 = time.perf_counter()
    pred.predict(reqs[0], models)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for r in reqs:
        pred.predict(r, models)
    return {"first_call_ms": first * 1e3, "predict_us": (time.perf_counter() - t0) / len(reqs) * 1e6}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def format_report(r: dict[str, Any]) -> str:
    lines = [f"QoS-aware edge router bucket predictors (xgboost, expert one-hot): {len(r['experts'])} experts, "
             f"seed {r['seed']}, "
             f"{r['n_train_pairs']} train / {r['n_test_pairs']} test (request, expert) pairs, "
             f"score buckets over [0, {r['score_max']:g}], length buckets over [0, {LEN_MAX:g}]",
             f"{'target':<14}{'':>4}{'model':>8}{'paper':>8}{'maj/exp':>9}{'maj/all':>9}{'ceiling':>9}"
             f"{'ceil+z':>8}{'oracle':>8}"]
    for t, v in r["targets"].items():
        for k in (1, 3):
            lines.append(f"{t:<14}{f'top{k}':>4}" + "".join(f"{_pct(v[f'{c}_top{k}']):>{wd}}" for c, wd in (
                ("model", 8), ("paper", 8), ("majority_expert", 9), ("majority_global", 9), ("ceiling", 9),
                ("ceiling_shared", 8), ("oracle", 8))))
    lines.append("maj/exp: each expert's most frequent training buckets; maj/all: the global ones; ceiling: best "
                 "possible from these features; ceil+z: with the request's latent factor visible")
    for t, v in r["targets"].items():
        lines.append(f"{t} top-1 per expert (model / maj/exp): " + ", ".join(
            f"{e['expert']} {_pct(e['model_top1'])}/{_pct(e['majority_expert_top1'])}" for e in v["per_expert"]))
    if "predict_us" in r:
        lines.append(f"fit {r['fit_seconds']} s; QoSBucketPredictor.predict {r['predict_us']:.1f} us/call warm "
                     f"(first call per task {r['first_call_ms']:.0f} ms: grid of {GRID_MAX + 1} prompts)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmsim.envs.predictors.qos",
                                 description="Train and evaluate the QoS-aware edge router's score and length bucket "
                                             "predictors.")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="requests drawn (x experts pairs, 80:20)")
    ap.add_argument("--seed", type=int, default=0, help="workload, split and classifier seed")
    ap.add_argument("--experts", default=",".join(QOS_EXPERTS), help="comma-separated expert names")
    ap.add_argument("--score-max", type=lambda v: v if v == "observed" else float(v), default=1.0,
                    help="score buckets over [0, X]; 'observed': the training maximum")
    ap.add_argument("--out", help="save to DIR (qos_predictor.json + model files) or to a .json path")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    a = ap.parse_args(argv)
    try:
        experts = [m.strip() for m in a.experts.split(",") if m.strip()]
        model, report = train_qos_predictor(experts, a.samples, a.seed, a.score_max)
        reqs = MixtureWorkload(qos_edge_mixture(experts)).requests(a.seed + 1, 2000)
        report.update(time_predict(QoSBucketPredictor(model), reqs, experts))
        if a.out:
            report["saved"] = [str(p) for p in model.save(a.out)]
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return print_report(report, "llmsim.envs.predictors.qos", argv, a.json, bool(a.out), format_report)


if __name__ == "__main__":
    raise SystemExit(main())
