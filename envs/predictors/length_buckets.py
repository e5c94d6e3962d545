"""Learned output-length bucket predictor of "Intelligent Router for LLM Workloads" (Sec. 4.1), for any env.

The paper fine-tunes DistilBERT on the prompt text plus a task hint and classifies the response length into
buckets 0-250, 250-1,000 and 1,000-4,000 tokens (79.15 % top-1). Our requests carry no prompt text, so the
classifier sees what a :class:`~llmsim.request.Request` legitimately carries at arrival: its task (the
hint) and its prompt length. Never ``output_tokens``: that is the label.

* :func:`collect_samples` draws labelled requests from an env workload into a DataFrame.
* :class:`BucketPredictor` is the fitted classifier (xgboost by default, scikit-learn's
  HistGradientBoostingClassifier as the alternative) with its bucket -> length mapping; it saves to a
  small JSON file plus xgboost's own UBJ model file beside it and refuses anything else with one ConfigError line.
  Nothing is unpickled: scikit-learn models live in memory only (scikit-learn saves only by pickle), and the
  loader parses JSON and xgboost's UBJ, nothing else. The sha256 in the JSON finds a model file that does not
  belong to it; it proves nothing of who wrote either, so safety never rests on it.
* :class:`LearnedPredictor` wraps it for the envs (predicted length per model, oracle quality).
* :func:`llmsim.envs.predictors.from_config.make_agent_predictor` turns a config value into one.

CLI: ``python -m llmsim.envs.predictors.length_buckets --samples 20000 --seed 0 [--model xgboost|sklearn]
[--out P] [--json]``. See docs/predictors.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.envs.exported import file_sha256
from llmsim.envs.predictors.base import OraclePredictor, Predictor
from llmsim.envs.predictors.reports import print_report
from llmsim.envs.predictors.saved import MODEL_FILE_SUFFIXES, is_model_file_name, load_xgboost, one_line, read_json
from llmsim.envs.tasks import TaskMixture
from llmsim.envs.workloads import EnvWorkload, MixtureWorkload, make_workload
from llmsim.errors import ConfigError
from llmsim.request import Request

# The paper's buckets (Sec. 4.1), half-open [lo, hi): 250 is in bucket 1, 1,000 in bucket 2; anything at or
# above 4,000 also goes to the last bucket (the context window is 4,096).
BUCKET_EDGES = (250, 1000)
BUCKET_BOUNDS = (0, 250, 1000, 4000)
BUCKET_NAMES = ("0-250", "250-1000", "1000-4000+")
N_BUCKETS = len(BUCKET_NAMES)
LENGTH_RULES = ("median", "midpoint", "upper")
MODELS = ("xgboost", "sklearn")
PAPER_ACCURACY = 0.7915
# the paper's Table 1, "Predictor acc. Ours", by our task names (llmsim.envs.tasks.WORKLOAD_ROUTER_TASKS)
PAPER_TASK_ACCURACY = {"translation": 0.9310, "qna": 0.7036, "sentiment": 0.7992, "in_context_qna": 0.6527,
                       "entity_recognition": 0.9506}
FORMAT = "llmsim-length-bucket-predictor"
VERSION = 1
NO_TASK = "<none>"
GRID_MAX = 4096  # LearnedPredictor precomputes prompts 0..GRID_MAX per task in one batched call
INSTALL_HINT = "pip install -e '.[predict]'"
SKLEARN_NOT_SAVED = ("a scikit-learn predictor is not saved (scikit-learn's only format is a pickle, which llmsim "
                     "never loads); use model xgboost, saved in xgboost's UBJ format, or keep sklearn in memory")


def bucket_of(tokens: Any) -> np.ndarray:
    """Bucket index (0, 1, 2) of output lengths: 0 for < 250, 1 for [250, 1000), 2 for >= 1000."""
    return np.searchsorted(np.asarray(BUCKET_EDGES), np.asarray(tokens), side="right").astype(np.int64)


def bucket_lengths(outputs: np.ndarray, buckets: np.ndarray, rule: str = "median") -> list[float]:
    """Representative length per bucket: what a predicted bucket becomes as d_hat.

    ``median``: the median true length of the training samples in the bucket (the best single guess under
    absolute error, so the reward's progress o / d_hat is least biased); a bucket without samples falls back
    to its midpoint. ``midpoint``: (lo + hi) / 2. ``upper``: the bucket's upper bound (Min-Min's choice)."""
    if rule not in LENGTH_RULES:
        raise ConfigError(f"lengths: unknown rule {rule!r}; expected one of {list(LENGTH_RULES)}")
    out = []
    for b in range(N_BUCKETS):
        lo, hi = BUCKET_BOUNDS[b], BUCKET_BOUNDS[b + 1]
        sel = outputs[buckets == b]
        if rule == "upper":
            out.append(float(hi))
        elif rule == "median" and len(sel):
            out.append(float(np.median(sel)))
        else:
            out.append((lo + hi) / 2.0)
    return out


# ---------------------------------------------------------------------------- samples and features
def as_workload(workload: Any) -> EnvWorkload:
    """A TaskMixture, an EnvWorkload, a workload spec mapping or None (the paper's five-task mixture)."""
    if workload is None:
        return make_workload({"kind": "mixture", "preset": "workload_router"})
    if isinstance(workload, TaskMixture):
        return MixtureWorkload(workload)
    if isinstance(workload, Mapping):
        return make_workload(dict(workload))
    if isinstance(workload, EnvWorkload):
        return workload
    raise ConfigError(f"workload: expected a TaskMixture, an EnvWorkload or a workload mapping, got {workload!r}")


def task_key(task: str | None) -> str:
    return NO_TASK if task is None else str(task)


def requests_frame(reqs: Sequence[Request], target_model: str | None = None) -> pd.DataFrame:
    """Arrival-time features (task, prompt_tokens) plus the label (output tokens on ``target_model``)."""
    out = [r.output_for(target_model) if target_model else r.output_tokens for r in reqs]
    return pd.DataFrame({
        "task": [task_key(r.task) for r in reqs],
        "prompt_tokens": np.array([r.prompt_tokens for r in reqs], dtype=np.int64),
        "output_tokens": np.array(out, dtype=np.int64),
        "bucket": bucket_of(out),
    })


def collect_samples(workload: Any = None, n: int = 20000, seed: int = 0,
                    target_model: str | None = None) -> pd.DataFrame:
    """``n`` labelled requests of ``workload`` (default: the paper's mixture) drawn as an episode of seed ``seed``."""
    if not isinstance(n, int) or n < 2:
        raise ConfigError(f"samples: expected an integer >= 2, got {n!r}")
    return requests_frame(as_workload(workload).requests(seed, n), target_model)


def feature_names(tasks: Sequence[str]) -> list[str]:
    return ["prompt_tokens"] + [f"task={t}" for t in tasks]


def feature_matrix(tasks: Sequence[str], task_col: Sequence[str], prompts: Any) -> np.ndarray:
    """prompt_tokens plus a one-hot of the task over the training vocabulary (an unseen task is all zeros)."""
    prompts = np.asarray(prompts, dtype=np.float32)
    x = np.zeros((len(prompts), 1 + len(tasks)), dtype=np.float32)
    x[:, 0] = prompts
    col = {t: i + 1 for i, t in enumerate(tasks)}
    for r, t in enumerate(task_col):
        j = col.get(t)
        if j is not None:
            x[r, j] = 1.0
    return x


def split(df: pd.DataFrame, seed: int, test_frac: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Random 80:20 train/test split (the paper's A.5), fixed by ``seed``."""
    idx = np.random.default_rng(seed).permutation(len(df))
    n_test = max(1, int(round(test_frac * len(df))))
    return df.iloc[idx[n_test:]].reset_index(drop=True), df.iloc[idx[:n_test]].reset_index(drop=True)


# ---------------------------------------------------------------------------- the classifier
def _new_model(kind: str, seed: int) -> Any:
    """An unfitted classifier; imports are lazy so oracle / noisy configs work without the predict extra."""
    try:
        if kind == "xgboost":
            from xgboost import XGBClassifier  # optional: the predict extra

            return XGBClassifier(n_estimators=100, max_depth=4, learning_rate=0.1, tree_method="hist",
                                 random_state=seed, n_jobs=1, verbosity=0)
        if kind == "sklearn":
            from sklearn.ensemble import HistGradientBoostingClassifier  # optional: the predict extra

            return HistGradientBoostingClassifier(max_iter=100, max_depth=4, learning_rate=0.1,
                                                  early_stopping=False, random_state=seed)
    except ImportError as e:
        raise ConfigError(f"model: {kind!r} needs the predict extra ({INSTALL_HINT}): {e}") from None
    raise ConfigError(f"model: unknown classifier {kind!r}; expected one of {list(MODELS)}")


def _one_thread(kind: str) -> AbstractContextManager[Any]:
    """scikit-learn's OpenMP pool pinned to one thread, like xgboost's n_jobs=1: on a small shared machine
    the default pool oversubscribes (a 16k-sample fit measured 5-36 s with 2 threads, 0.9 s with one)."""
    if kind != "sklearn":
        return nullcontext()
    from threadpoolctl import threadpool_limits  # optional: scikit-learn's, with the predict extra

    return threadpool_limits(1)


@dataclass
class BucketPredictor:
    """A fitted bucket classifier. ``classes[i]`` is the bucket of model output i (only the buckets seen in
    training; with one bucket seen the model is a constant), ``lengths[b]`` the d_hat of bucket b."""

    kind: str  # "xgboost", "sklearn" or "constant"
    tasks: list[str]
    classes: list[int]
    lengths: list[float]
    length_rule: str = "median"
    model: Any = None
    seed: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def features(self) -> list[str]:
        return feature_names(self.tasks)

    @classmethod
    def fit(cls, train: pd.DataFrame, model: str = "xgboost", seed: int = 0,
            lengths: str = "median") -> BucketPredictor:
        if model not in MODELS:
            raise ConfigError(f"model: unknown classifier {model!r}; expected one of {list(MODELS)}")
        tasks = sorted(set(train["task"]))
        buckets = train["bucket"].to_numpy()
        classes = sorted(int(b) for b in np.unique(buckets))
        reps = bucket_lengths(train["output_tokens"].to_numpy(), buckets, lengths)
        info = {"n_train": len(train), "trained_with": model}
        if len(classes) == 1:  # xgboost and sklearn both refuse a single class; the answer is that class
            return cls("constant", tasks, classes, reps, lengths, None, seed, info)
        clf = _new_model(model, seed)
        x = feature_matrix(tasks, train["task"].tolist(), train["prompt_tokens"].to_numpy())
        with _one_thread(model):
            clf.fit(x, np.searchsorted(classes, buckets))  # contiguous labels 0..k-1, as xgboost requires
        return cls(model, tasks, classes, reps, lengths, clf, seed, info)

    def predict_buckets(self, task_col: Sequence[str], prompts: Any) -> np.ndarray:
        n = len(task_col)
        if self.kind == "constant":
            return np.full(n, self.classes[0], dtype=np.int64)
        x = feature_matrix(self.tasks, task_col, prompts)
        with _one_thread(self.kind):
            idx = np.asarray(self.model.predict(x)).astype(np.int64).reshape(n)
        return np.asarray(self.classes, dtype=np.int64)[idx]

    def predict_lengths(self, task_col: Sequence[str], prompts: Any) -> np.ndarray:
        return np.asarray(self.lengths, dtype=np.float64)[self.predict_buckets(task_col, prompts)]

    def predict_frame(self, df: pd.DataFrame) -> np.ndarray:
        return self.predict_buckets(df["task"].tolist(), df["prompt_tokens"].to_numpy())

    # ------------------------------------------------------------------ files
    def meta(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "kind": self.kind, "tasks": self.tasks,
                "features": self.features, "classes": self.classes, "bucket_edges": list(BUCKET_EDGES),
                "bucket_names": list(BUCKET_NAMES), "lengths": self.lengths, "length_rule": self.length_rule,
                "seed": self.seed, "info": self.info}

    def save(self, path: str | Path) -> list[Path]:
        """Write ``path`` (JSON: buckets, lengths, features) and, for an xgboost model, ``<stem>.model.ubj`` beside
        it. Returns the files written. A scikit-learn model is refused (:data:`SKLEARN_NOT_SAVED`)."""
        p = Path(path)
        if p.suffix != ".json":
            raise ConfigError(f"{p}: expected a predictor path ending in .json (the model file goes beside it)")
        if self.kind == "sklearn":
            raise ConfigError(f"{p}: {SKLEARN_NOT_SAVED}")
        p.parent.mkdir(parents=True, exist_ok=True)
        meta = self.meta()
        written = []
        if self.kind != "constant":
            mp = p.with_name(p.stem + ".model.ubj")
            self.model.save_model(str(mp))
            meta["model_file"], meta["model_sha256"] = mp.name, file_sha256(mp)
            written.append(mp)
        p.write_text(json.dumps(meta, indent=1) + "\n")
        return [p, *written]

    @classmethod
    def load(cls, path: str | Path) -> BucketPredictor:
        """The predictor saved at ``path``; anything else is refused with one ConfigError line naming the file."""
        p = Path(path)
        meta = _read_meta(p)
        model = None
        if meta["kind"] != "constant":
            model = load_xgboost(p, meta["model_file"], meta.get("model_sha256"), lambda: _new_model("xgboost", 0))
        bp = cls(meta["kind"], meta["tasks"], meta["classes"], [float(v) for v in meta["lengths"]],
                 meta["length_rule"], model, int(meta.get("seed", 0)), dict(meta.get("info") or {}))
        if model is not None:
            try:  # a model of another shape (features, classes) fails here, not mid-episode
                probe = bp.predict_buckets([bp.tasks[0]] * 2, [10, 900])
            except Exception as e:  # noqa: BLE001 - any library error means the file does not fit
                raise ConfigError(f"{p}: model file does not fit the predictor's {len(bp.features)} features "
                                  f"and {len(bp.classes)} classes: {one_line(e)}") from None
            if not set(probe.tolist()) <= set(bp.classes):
                raise ConfigError(f"{p}: model predicts classes outside the saved buckets {bp.classes}")
        return bp


def _expect(ok: bool, path: Path, what: str, got: Any) -> None:
    if not ok:
        raise ConfigError(f"{path}: not a valid {FORMAT} file: expected {what}, got {got!r}"[:500])


def _read_meta(p: Path) -> dict[str, Any]:
    """The JSON of a saved predictor, every field checked (one ConfigError line naming the file and key)."""
    hint = "the .json written by `python -m llmsim.envs.predictors.length_buckets --out PATH`"
    meta = read_json(p, hint)
    _expect(isinstance(meta, dict) and meta.get("format") == FORMAT, p, f"format {FORMAT!r}",
            meta.get("format") if isinstance(meta, dict) else type(meta).__name__)
    _expect(meta.get("version") == VERSION, p, f"version {VERSION}", meta.get("version"))
    if meta.get("kind") == "sklearn":
        raise ConfigError(f"{p}: kind 'sklearn' is not loaded: {SKLEARN_NOT_SAVED}")
    _expect(meta.get("kind") in ("xgboost", "constant"), p, "kind in ['xgboost', 'constant']", meta.get("kind"))
    tasks, classes, lengths = meta.get("tasks"), meta.get("classes"), meta.get("lengths")
    _expect(isinstance(tasks, list) and len(tasks) > 0 and all(isinstance(t, str) for t in tasks), p,
            "tasks: a non-empty list of names", tasks)
    _expect(meta.get("features") == feature_names(tasks), p, f"features {feature_names(tasks)}",
            meta.get("features"))
    _expect(list(meta.get("bucket_edges") or []) == list(BUCKET_EDGES), p, f"bucket_edges {list(BUCKET_EDGES)}",
            meta.get("bucket_edges"))
    _expect(isinstance(classes, list) and len(classes) > 0 and classes == sorted(set(classes))
            and all(isinstance(c, int) and 0 <= c < N_BUCKETS for c in classes), p,
            f"classes: sorted distinct buckets in 0..{N_BUCKETS - 1}", classes)
    _expect(isinstance(lengths, list) and len(lengths) == N_BUCKETS
            and all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in lengths), p,
            f"lengths: {N_BUCKETS} positive numbers", lengths)
    _expect(meta.get("length_rule") in LENGTH_RULES, p, f"length_rule in {list(LENGTH_RULES)}",
            meta.get("length_rule"))
    _expect(meta["kind"] != "constant" or len(classes) == 1, p, "one class for a constant predictor", classes)
    if meta["kind"] != "constant":
        _expect(is_model_file_name(meta.get("model_file")), p,
                f"model_file: the name of an xgboost model file beside it ({' or '.join(MODEL_FILE_SUFFIXES)})",
                meta.get("model_file"))
    return meta


def saved_files(path: str | Path) -> list[Path]:
    """The files of the predictor saved at ``path``: the .json and the model file it names (checked as by load)."""
    p, meta = Path(path), _read_meta(Path(path))
    return [p] if meta["kind"] == "constant" else [p, p.with_name(meta["model_file"])]


# ---------------------------------------------------------------------------- evaluation
def evaluate(bp: BucketPredictor, train: pd.DataFrame, test: pd.DataFrame) -> dict[str, Any]:
    """Top-1 accuracy overall and per task, next to the majority-class baseline (the training set's most
    frequent bucket for everyone), the task-majority baseline (each task's most frequent bucket) and the paper."""
    y = test["bucket"].to_numpy()
    pred = bp.predict_frame(test)
    majority = int(train["bucket"].mode().iloc[0])
    task_major = train.groupby("task")["bucket"].agg(lambda s: int(s.mode().iloc[0])).to_dict()
    tmaj = test["task"].map(lambda t: task_major.get(t, majority)).to_numpy()
    rows = []
    for t in sorted(set(test["task"])):
        sel = (test["task"] == t).to_numpy()
        rows.append({"task": t, "n_test": int(sel.sum()), "accuracy": float((pred[sel] == y[sel]).mean()),
                     "majority": float((y[sel] == majority).mean()),
                     "task_majority": float((tmaj[sel] == y[sel]).mean()), "paper": PAPER_TASK_ACCURACY.get(t)})
    return {"n_train": len(train), "n_test": len(test), "model": bp.kind, "seed": bp.seed,
            "accuracy": float((pred == y).mean()), "majority_baseline": float((y == majority).mean()),
            "majority_bucket": majority, "task_majority_baseline": float((tmaj == y).mean()),
            "paper_accuracy": PAPER_ACCURACY, "per_task": rows, "lengths": bp.lengths,
            "length_rule": bp.length_rule,
            "test_buckets": np.bincount(y, minlength=N_BUCKETS).tolist(),
            "predicted_buckets": np.bincount(pred, minlength=N_BUCKETS).tolist()}


def train_predictor(workload: Any = None, samples: int = 20000, seed: int = 0, model: str = "xgboost",
                    lengths: str = "median", target_model: str | None = None
                    ) -> tuple[BucketPredictor, dict[str, Any]]:
    """Collect ``samples`` requests, split 80:20, fit on the 80 %, evaluate on the 20 %."""
    df = collect_samples(workload, samples, seed, target_model)
    train, test = split(df, seed)
    t0 = time.perf_counter()
    bp = BucketPredictor.fit(train, model, seed, lengths)
    fit_s = time.perf_counter() - t0
    report = evaluate(bp, train, test)
    report["fit_seconds"] = round(fit_s, 3)
    return bp, report


def _pct(v: float | None) -> str:
    return "    -" if v is None else f"{100 * v:5.2f}"


def format_report(r: dict[str, Any]) -> str:
    """The accuracy table as text (percentages)."""
    lines = [f"output-length buckets {list(BUCKET_NAMES)}: {r['model']} classifier, seed {r['seed']}, "
             f"{r['n_train']} train / {r['n_test']} test requests",
             f"{'task':<20}{'n_test':>7}{'model %':>9}{'majority %':>12}{'task-maj %':>12}{'paper %':>9}"]
    for row in r["per_task"]:
        lines.append(f"{row['task']:<20}{row['n_test']:>7}{_pct(row['accuracy']):>9}{_pct(row['majority']):>12}"
                     f"{_pct(row['task_majority']):>12}{_pct(row['paper']):>9}")
    lines.append(f"{'overall':<20}{r['n_test']:>7}{_pct(r['accuracy']):>9}{_pct(r['majority_baseline']):>12}"
                 f"{_pct(r['task_majority_baseline']):>12}{_pct(r['paper_accuracy']):>9}")
    lines.append(f"majority class: bucket {r['majority_bucket']} ({BUCKET_NAMES[r['majority_bucket']]}); "
                 f"test buckets {r['test_buckets']}, predicted {r['predicted_buckets']}")
    lines.append(f"bucket -> d_hat ({r['length_rule']}): " + ", ".join(
        f"{n}: {v:g}" for n, v in zip(BUCKET_NAMES, r["lengths"])))
    if "predict_us" in r:
        lines.append(f"fit {r['fit_seconds']} s; LearnedPredictor.predict {r['predict_us']:.1f} us/request "
                     f"(one raw model call: {r['raw_predict_us']:.0f} us)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the env predictor
class LearnedPredictor(Predictor):
    """Predicted length of a fitted :class:`BucketPredictor` (the same on every model: it is trained on one
    model's outputs) and the oracle's quality (this predictor only predicts lengths).

    The classifier is a pure function of (task, prompt_tokens), so on a task's first request it predicts
    prompts 0..GRID_MAX in one batched call; later requests cost an array lookup, not a model call."""

    def __init__(self, bucket_predictor: BucketPredictor | str | Path) -> None:
        self.bp = bucket_predictor if isinstance(bucket_predictor, BucketPredictor) \
            else BucketPredictor.load(bucket_predictor)
        self.oracle = OraclePredictor()
        self.grids: dict[str, np.ndarray] = {}
        self.overflow: dict[tuple[str, int], float] = {}

    @classmethod
    def train(cls, workload: Any = None, samples: int = 20000, seed: int = 0, model: str = "xgboost",
              lengths: str = "median", target_model: str | None = None) -> LearnedPredictor:
        return cls(train_predictor(workload, samples, seed, model, lengths, target_model)[0])

    def length(self, task: str | None, prompt_tokens: int) -> float:
        key = task_key(task)
        grid = self.grids.get(key)
        if grid is None:
            grid = self.grids[key] = self.bp.predict_lengths([key] * (GRID_MAX + 1), np.arange(GRID_MAX + 1))
        p = int(prompt_tokens)
        if 0 <= p <= GRID_MAX:
            return float(grid[p])
        v = self.overflow.get((key, p))
        if v is None:
            if len(self.overflow) > 65536:
                self.overflow.clear()
            v = self.overflow[(key, p)] = float(self.bp.predict_lengths([key], [p])[0])
        return v

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        _, qual = self.oracle.predict(req, models)
        return np.full(len(models), self.length(req.task, req.prompt_tokens)), qual


def time_predict(lp: LearnedPredictor, reqs: Sequence[Request], models: Sequence[str]) -> tuple[float, float]:
    """(us per LearnedPredictor.predict after warm-up, us of one raw model call on one row)."""
    for r in reqs[:50]:
        lp.predict(r, models)
    t0 = time.perf_counter()
    for r in reqs:
        lp.predict(r, models)
    per = (time.perf_counter() - t0) / max(1, len(reqs)) * 1e6
    t0 = time.perf_counter()
    k = 20
    for r in reqs[:k]:
        lp.bp.predict_buckets([task_key(r.task)], [r.prompt_tokens])
    return per, (time.perf_counter() - t0) / k * 1e6


# ---------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmsim.envs.predictors.length_buckets",
                                 description="Train and evaluate the output-length bucket predictor of "
                                             "'Intelligent Router for LLM Workloads'.")
    ap.add_argument("--samples", type=int, default=20000, help="requests drawn (split 80:20 train/test)")
    ap.add_argument("--seed", type=int, default=0, help="workload, split and classifier seed")
    ap.add_argument("--model", choices=MODELS, default="xgboost")
    ap.add_argument("--preset", default="workload_router", help="env mixture preset to draw requests from")
    ap.add_argument("--lengths", choices=LENGTH_RULES, default="median", help="bucket -> d_hat rule")
    ap.add_argument("--out", help="save the fitted predictor to this .json (model file beside it)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    a = ap.parse_args(argv)
    try:
        if a.out and a.model == "sklearn":
            raise ConfigError(f"--out: {SKLEARN_NOT_SAVED}")
        wl = as_workload({"kind": "mixture", "preset": a.preset})
        bp, report = train_predictor(wl, a.samples, a.seed, a.model, a.lengths)
        lp = LearnedPredictor(bp)
        reqs = wl.requests(a.seed + 1, 2000)
        report["predict_us"], report["raw_predict_us"] = time_predict(lp, reqs, ["m"])
        if a.out:
            report["saved"] = [str(p) for p in bp.save(a.out)]
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return print_report(report, "llmsim.envs.predictors.length_buckets", argv, a.json, bool(a.out), format_report)


if __name__ == "__main__":
    raise SystemExit(main())
