"""RouteBalance's learned predictors (the RouteBalance paper's §4.2 and §6.8; docs/routebalance_predictors.md).

* :class:`KnnEstimator`, registered as ``estimator: knn``: per-(request, model) quality and output length from
  the k nearest labelled training requests (scikit-learn ``NearestNeighbors``, exact k-d tree search,
  inverse-distance weights as the paper's ``w_n = (1 / (d_n + 1e-6)) / sum``). The request features are the
  ones a router has at routing time and nothing else: the request's ``task`` (one-hot, scaled so that a
  neighbour from another task is farther than any of the same task), ``log1p(prompt_tokens)`` (standardised
  over the training sample) and, when the training requests carry one, the prompt embedding
  ``extra["embedding"]`` (the stand-in for the paper's MiniLM vector). Never the request's own labels
  (``quality_by_model``, ``outputs_by_model``, ``output_tokens``): those are the training targets, read from
  training requests only. :meth:`KnnEstimator.predict_batch` answers a whole batch window with one neighbour
  search.
* :class:`XgbTpotHead`, registered as ``tpot_prior: xgboost``: one XGBoost regressor per tier (model name)
  from an instance's telemetry features (:data:`TPOT_FEATURES`) to the realised mean per-token decode time
  over the next window, trained on telemetry recorded by ``llmsim.simulation.telemetry``. RouteBalance's
  latency estimate then uses its prediction on the dead-reckoned state D instead of the telemetry's step time.

Both learn from data the caller gives: a list (requests, telemetry rows) or ``{sampler: NAME, ...}`` naming a
registered training sampler (:mod:`llmsim.routing.samplers`). scikit-learn and xgboost are the ``predict``
extra, imported only when an estimator or head is built: ``import llmsim`` does not load them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from llmsim.errors import ConfigError
from llmsim.routing.base import kwarg_number
from llmsim.routing.routebalance.estimators import register_estimator
from llmsim.routing.routebalance.state import TPOT_HEADS
from llmsim.routing.samplers import training_sample

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.routing.routebalance.state import Reckoned
    from llmsim.state.cluster_state import ClusterState, InstanceState

DEFAULT_K = 10  # the paper's k; it reports the frontier insensitive to k in {5, 10, 20, 50}
TASK_SCALE = 100.0  # one-hot weight of the task: a request's neighbours come from its own task when it has k
EPS = 1e-6  # the paper's inverse-distance weight offset

# the instance features of the TPOT head, in this order (telemetry columns of the same names)
TPOT_FEATURES = ("num_running", "num_waiting", "kv_used_frac", "pending_prefill_tokens", "pending_decode_tokens",
                 "context_tokens", "max_num_seqs", "step_time", "throughput")
LABEL = "tpot_next"  # realised mean per-token decode time (s) over the next window
# the paper's code (train_xgboost.py); its number of boosting rounds is not recovered (200 here)
XGB_PARAMS = {"objective": "reg:squarederror", "max_depth": 6, "eta": 0.1, "subsample": 0.8,
              "colsample_bytree": 0.8, "min_child_weight": 5, "seed": 42, "nthread": 1, "device": "cpu"}
MIN_TPOT_S = 0.001  # the paper's code clamps the prediction to >= 1 ms


# ---------------------------------------------------------------------- features
def embedding_of(r: Request) -> Sequence[float] | None:
    """The request's prompt embedding (``extra["embedding"]``), or None."""
    e = (r.extra or {}).get("embedding")
    return e if isinstance(e, (list, tuple, np.ndarray)) and len(e) else None


def request_features(tasks: Sequence[str], reqs: Sequence[Request], mu: float, sd: float,
                     dim: int = 0) -> np.ndarray:
    """[one-hot(task) x TASK_SCALE, (log1p(prompt_tokens) - mu) / sd, embedding[:dim]]: routing-time features
    only (a request without an embedding, or a shorter one, gets zeros there: the embedding's centre)."""
    idx = {t: k for k, t in enumerate(tasks)}
    nt = len(tasks)
    x = np.zeros((len(reqs), nt + 1 + dim))
    for row, r in enumerate(reqs):
        k = idx.get(str(r.task))
        if k is not None:  # an unseen task: equally far from every training task
            x[row, k] = TASK_SCALE
        x[row, nt] = (math.log1p(r.prompt_tokens) - mu) / sd
        if dim:
            e = embedding_of(r)
            if e is not None:
                v = np.asarray(e, dtype=float)[:dim]
                x[row, nt + 1:nt + 1 + len(v)] = v
    return x


# ---------------------------------------------------------------------- the kNN estimator
@register_estimator("knn")
class KnnEstimator:
    """Quality and output length per model: inverse-distance-weighted means over the k nearest training
    requests (module docstring). ``train``: labelled requests (each with ``quality_by_model``; lengths from
    ``outputs_by_model``, else ``output_tokens``) or ``{sampler: NAME, ...}``. ``weights``: ``distance`` (paper) or
    ``uniform``. Deterministic: exact search, ties by training order."""

    def __init__(self, seed: int = 0, train: Any = None, k: Any = DEFAULT_K, weights: str = "distance") -> None:
        self.seed = seed
        self.k = int(kwarg_number("estimator_kwargs.k", k, integer=True))
        if weights not in ("distance", "uniform"):
            raise ConfigError(f"policy.kwargs.estimator_kwargs.weights: expected 'distance' or 'uniform', got "
                              f"{weights!r}")
        self.weights = weights
        if train is None:
            raise ConfigError("policy.kwargs.estimator_kwargs.train: the knn estimator needs labelled training "
                              "requests (a list, or {sampler: NAME, ...kwargs})")
        reqs = training_sample(train, "policy.kwargs.estimator_kwargs.train")
        if not reqs:
            raise ConfigError("policy.kwargs.estimator_kwargs.train: no training requests")
        self.fit(reqs)

    def fit(self, reqs: Sequence[Request]) -> None:
        from sklearn.neighbors import NearestNeighbors  # optional: the predict extra

        bad = [r.id for r in reqs if not r.quality_by_model]
        if bad:
            raise ConfigError(f"policy.kwargs.estimator_kwargs.train: training request(s) {bad[:5]} have no "
                              "quality_by_model labels")
        self.models = sorted(set.intersection(*(set(r.quality_by_model or {}) for r in reqs)))
        if not self.models:
            raise ConfigError("policy.kwargs.estimator_kwargs.train: no model is labelled in every training request")
        self.tasks = sorted({str(r.task) for r in reqs})
        dims = {len(e) for e in map(embedding_of, reqs) if e is not None}
        self.dim = min(dims) if dims else 0  # the embedding is used only if the training requests carry one
        logp = np.log1p([r.prompt_tokens for r in reqs])
        self.mu, self.sd = float(logp.mean()), float(logp.std()) or 1.0
        self.q = np.array([[float(r.quality_by_model[m]) for m in self.models] for r in reqs])  # type: ignore[index]
        self.length = np.array([[float(r.output_for(m)) for m in self.models] for r in reqs])
        self.k_eff = min(self.k, len(reqs))
        self.nn = NearestNeighbors(n_neighbors=self.k_eff, algorithm="kd_tree").fit(
            request_features(self.tasks, reqs, self.mu, self.sd, self.dim))
        self.col = {m: j for j, m in enumerate(self.models)}
        self.calls = 0  # neighbour searches (one per batch window in RouteBalance)

    def _weights(self, dist: np.ndarray) -> np.ndarray:
        w = np.ones_like(dist) if self.weights == "uniform" else 1.0 / (dist + EPS)
        return w / w.sum(axis=1, keepdims=True)

    def predict_all(self, reqs: Sequence[Request]) -> tuple[np.ndarray, np.ndarray]:
        """(qualities, lengths), each (len(reqs), len(self.models)): one batched neighbour search."""
        self.calls += 1
        dist, ind = self.nn.kneighbors(request_features(self.tasks, reqs, self.mu, self.sd, self.dim))
        w = self._weights(dist)[:, :, None]
        return (w * self.q[ind]).sum(axis=1), (w * self.length[ind]).sum(axis=1)

    def _cols(self, models: Sequence[str]) -> list[int]:
        missing = [m for m in models if m not in self.col]
        if missing:
            raise ConfigError(f"policy.kwargs.estimator_kwargs.train: the knn estimator has no labels for "
                              f"model(s) {missing} (trained on {self.models})")
        return [self.col[m] for m in models]

    def predict(self, request: Request, models: Sequence[str]) -> tuple[list[float], list[float]]:
        return self.predict_batch([request], [models])[0]

    def predict_batch(self, requests: Sequence[Request], models: Sequence[Sequence[str]]
                      ) -> list[tuple[list[float], list[float]]]:
        """One neighbour search for a whole batch window; ``models[k]``: the candidate models of request k."""
        cols = [self._cols(ms) for ms in models]
        q, ln = self.predict_all(requests)
        return [(q[k, c].tolist(), ln[k, c].tolist()) for k, c in enumerate(cols)]


def estimator_accuracy(est: Any, test: Sequence[Request], models: Sequence[str] | None = None,
                       train: Sequence[Request] | None = None) -> dict[str, float]:
    """Held-out accuracy of an estimator (the paper's §6.8 figures): ``best_model_acc`` (its argmax quality is the
    request's argmax), ``quality_mae``, ``length_mae`` (tokens), ``length_mape``, the ``routed_quality`` of taking its
    argmax and the ``oracle_quality`` (per-request max). With ``train``, the same for the prompt-blind constant
    predictor (per-model training means; ``const_*``) and ``random_acc`` = 1 / #models."""
    models = list(models or sorted(test[0].quality_by_model or {}))
    qt = np.array([[r.quality_by_model[m] for m in models] for r in test])  # type: ignore[index]
    lt = np.array([[r.output_for(m) for m in models] for r in test], dtype=float)
    if isinstance(est, KnnEstimator):  # one batched search
        qa, la = est.predict_all(test)
        cols = [est.col[m] for m in models]
        qp, lp = qa[:, cols], la[:, cols]
    else:
        preds = [est.predict(r, models) for r in test]
        qp, lp = np.array([p[0] for p in preds]), np.array([p[1] for p in preds])
    out = _scores(qt, lt, qp, lp)
    out["oracle_quality"] = float(qt.max(axis=1).mean())
    out["random_acc"] = 1.0 / len(models)
    if train is not None:
        qc = np.array([[r.quality_by_model[m] for m in models] for r in train]).mean(axis=0)  # type: ignore[index]
        lc = np.array([[r.output_for(m) for m in models] for r in train], dtype=float).mean(axis=0)
        out.update({f"const_{k}": v for k, v in _scores(qt, lt, np.tile(qc, (len(test), 1)),
                                                        np.tile(lc, (len(test), 1))).items()})
    return out


def _scores(qt: np.ndarray, lt: np.ndarray, qp: np.ndarray, lp: np.ndarray) -> dict[str, float]:
    pick = qp.argmax(axis=1)  # ties: the first model
    rows = np.arange(len(qt))
    return {"best_model_acc": float((qt[rows, pick] >= qt.max(axis=1) - 1e-12).mean()),
            "quality_mae": float(np.abs(qp - qt).mean()), "routed_quality": float(qt[rows, pick].mean()),
            "length_mae": float(np.abs(lp - lt).mean()), "length_mape": float((np.abs(lp - lt) / lt).mean())}


# ---------------------------------------------------------------------- the per-tier TPOT head
def instance_features(inst: InstanceState) -> list[float]:
    """:data:`TPOT_FEATURES` of one instance's public state (waiting counts swapped requests too, as D does)."""
    return [float(inst.num_running), float(inst.num_waiting + inst.num_swapped),
            inst.kv_blocks_used / inst.kv_blocks_total if inst.kv_blocks_total else 0.0,
            float(inst.pending_prefill_tokens), float(inst.pending_decode_tokens), float(inst.context_tokens),
            float(inst.max_num_seqs), float(inst.step_time), float(inst.throughput)]


def load_telemetry(train: Any) -> pd.DataFrame:
    """Telemetry rows from a DataFrame, a .parquet / .csv path, a list of row mappings or ``{sampler: NAME,
    ...kwargs}`` naming a training sampler that returns rows (``routebalance_telemetry``)."""
    key = "tpot_kwargs.train"
    if isinstance(train, pd.DataFrame):
        df = train
    elif isinstance(train, (str, Path)):
        p = Path(train)
        try:
            df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
        except (OSError, ValueError, ImportError) as e:
            raise ConfigError(f"policy.kwargs.{key}: cannot read telemetry {str(p)!r} ({e})") from None
    elif isinstance(train, Mapping):
        df = pd.DataFrame(training_sample(train, f"policy.kwargs.{key}"))
    elif isinstance(train, Sequence):
        df = pd.DataFrame(list(train))
    else:
        raise ConfigError(f"policy.kwargs.{key}: expected a telemetry file, a DataFrame, rows or {{sampler: NAME, "
                          f"...}}, got {type(train).__name__}")
    missing = [c for c in ("model", *TPOT_FEATURES, LABEL) if c not in df.columns]
    if missing:
        raise ConfigError(f"policy.kwargs.{key}: telemetry lacks column(s) {missing}")
    if not len(df):
        raise ConfigError(f"policy.kwargs.{key}: no telemetry rows")
    return df


class XgbTpotHead:
    """One XGBoost TPOT regressor per tier (model name), the paper's hyper-parameters, ``rounds`` boosting
    rounds, inference pinned to one CPU thread, predictions clamped to >= 1 ms. A tier without telemetry
    falls back to the static prior. RouteBalance calls :meth:`observe` with the telemetry at every batch and
    :meth:`tpot_s` per candidate on the dead-reckoned D (its running / waiting / pending tokens override the
    telemetry's; the KV, context, step-time and throughput features are the last telemetry's)."""

    def __init__(self, train: Any = None, rounds: Any = 200) -> None:
        if train is None:
            raise ConfigError("policy.kwargs.tpot_kwargs.train: tpot_prior xgboost needs telemetry (a .parquet "
                              "file from `python -m llmsim.simulation.telemetry`, rows or a sampler)")
        self.rounds = int(kwarg_number("tpot_kwargs.rounds", rounds, integer=True))
        self.fit(load_telemetry(train))
        self._last: dict[int, list[float]] = {}
        self._cache: dict[tuple[str, tuple[float, ...]], float] = {}
        self.calls = 0

    def fit(self, df: pd.DataFrame) -> None:
        import xgboost as xgb  # optional: the predict extra

        self.boosters: dict[str, Any] = {}
        for model, g in df.groupby("model", sort=True):
            x = g[list(TPOT_FEATURES)].to_numpy(dtype=np.float64)
            y = g[LABEL].to_numpy(dtype=np.float64) * 1000.0  # ms: well-scaled squared error
            self.boosters[str(model)] = xgb.train(dict(XGB_PARAMS), xgb.DMatrix(x, label=y),
                                                  num_boost_round=self.rounds)

    def predict_frame(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted TPOT (s) per telemetry row (NaN for a tier it has no model for)."""
        out = np.full(len(df), np.nan)
        for model, idx in df.groupby("model", sort=True).indices.items():
            b = self.boosters.get(str(model))
            if b is not None:
                x = df[list(TPOT_FEATURES)].to_numpy(dtype=np.float64)[idx]
                out[idx] = np.maximum(b.inplace_predict(x) / 1000.0, MIN_TPOT_S)
        return out

    def observe(self, st: ClusterState) -> None:
        self._last = {inst.idx: instance_features(inst) for inst in st.instances}

    def tpot_s(self, d: Reckoned, prior_s: float) -> float:
        b = self.boosters.get(d.model)
        base = self._last.get(d.idx)
        if b is None or base is None:
            return prior_s
        f = list(base)
        f[0], f[1], f[3], f[4] = float(d.running), float(d.waiting), float(d.pending_prefill), float(d.pending_decode)
        key = (d.model, tuple(f))
        v = self._cache.get(key)
        if v is None:
            self.calls += 1
            v = max(float(b.inplace_predict(np.array([f]))[0]) / 1000.0, MIN_TPOT_S)
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = v
        return v


@TPOT_HEADS.register("xgboost")
def xgb_head(kwargs: Any) -> XgbTpotHead:
    """The ``tpot_prior: xgboost`` head from ``policy.kwargs.tpot_kwargs`` (``train``, ``rounds``)."""
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ConfigError(f"policy.kwargs.tpot_kwargs: expected a mapping, got {kwargs!r}")
    try:
        return XgbTpotHead(**dict(kwargs or {}))
    except TypeError as e:
        raise ConfigError(f"policy.kwargs.tpot_kwargs: {e}") from None



def tpot_accuracy(head: XgbTpotHead, test: pd.DataFrame, static_s: Mapping[str, float]) -> dict[str, float]:
    """Held-out MAE (ms) and MAPE of the head, of the static per-tier prior (``static_s``: model -> s) and of the
    last telemetry step time (the router's default ``latency: telemetry``; the prior when idle)."""
    y = test[LABEL].to_numpy(dtype=float)
    pred = head.predict_frame(test)
    prior = test["model"].map(lambda m: static_s[str(m)]).to_numpy(dtype=float)
    step = test["step_time"].to_numpy(dtype=float)
    step = np.where(step > 0, step, prior)
    out = {}
    for name, p in (("xgboost", pred), ("static", prior), ("step_time", step)):
        out[f"{name}_mae_ms"] = float(np.abs(p - y).mean() * 1000.0)
        out[f"{name}_mape"] = float((np.abs(p - y) / y).mean())
    return out
