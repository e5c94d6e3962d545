"""What a config's ``predictor`` value becomes: the envs' own predictors pass through, learned ones are built.

``oracle`` / ``noisy`` / ``zero`` (and their mappings) are :mod:`llmsim.envs.predictors.base`'s, built by the env
itself; ``learned`` is the output-length bucket predictor of "Intelligent Router for LLM Workloads"
(:mod:`llmsim.envs.predictors.length_buckets`), ``learned_qos`` the QoS-aware edge router's score and length bucket
predictors (:mod:`llmsim.envs.predictors.qos`). Training needs the ``predict`` extra (xgboost / scikit-learn).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmsim.envs.predictors.base import PREDICTORS, Predictor
from llmsim.envs.predictors.length_buckets import LearnedPredictor
from llmsim.envs.predictors.qos import DEFAULT_SAMPLES, QoSBucketPredictor, train_qos_predictor
from llmsim.envs.tasks import QOS_EXPERTS
from llmsim.errors import ConfigError

DEFAULT_LEARNED = {"samples": 20000, "seed": 0, "model": "xgboost"}
LEARNED_KEYS = ("kind", "path", "samples", "seed", "model", "workload", "lengths", "target_model")
QOS_KEYS = ("kind", "path", "samples", "seed", "experts", "score_max")


def make_agent_predictor(spec: Any) -> Any:
    """What env factories accept, from a config value.

    ``"oracle"`` / ``"noisy"`` / their mappings / a Predictor / None pass through (a non-dict mapping such as
    an OmegaConf node becomes a dict); ``{"kind": "learned", "path": P}`` loads a saved predictor;
    ``{"kind": "learned", "samples": N, "seed": s, "model": "xgboost"}`` (or just ``"learned"``) trains one
    now, on the WorkloadRouter mixture or on ``workload`` (an env workload mapping), and writes nothing to disk.
    ``{"kind": "learned_qos", ...}`` (or just ``"learned_qos"``): :func:`make_qos_predictor`."""
    if spec is None or isinstance(spec, Predictor):
        return spec
    if isinstance(spec, str):
        if spec in ("learned", "learned_qos"):
            return make_agent_predictor({"kind": spec})
        if spec not in PREDICTORS:
            raise ConfigError(f"predictor: unknown predictor {spec!r}; expected one of "
                              f"{sorted([*PREDICTORS.names(), 'learned', 'learned_qos'])}")
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"predictor: expected a name, a mapping with 'kind' or a Predictor, got {spec!r}")
    spec = dict(spec)
    if spec.get("kind") == "learned_qos":
        return make_qos_predictor(spec)
    if spec.get("kind") != "learned":
        return spec
    unknown = sorted(set(spec) - set(LEARNED_KEYS))
    if unknown:
        raise ConfigError(f"predictor: unknown key(s) {unknown} for kind 'learned'; allowed keys: "
                          f"{sorted(LEARNED_KEYS)}")
    if spec.get("path") is not None:
        extra = sorted(set(spec) - {"kind", "path"})
        if extra:
            raise ConfigError(f"predictor: 'path' loads a saved predictor; drop the training key(s) {extra}")
        return LearnedPredictor(str(spec["path"]))
    kw = {**DEFAULT_LEARNED, **{k: v for k, v in spec.items() if k not in ("kind", "path")}}
    for k in ("samples", "seed"):
        if isinstance(kw[k], bool) or not isinstance(kw[k], int) or kw[k] < 0:
            raise ConfigError(f"predictor.{k}: expected a non-negative integer, got {kw[k]!r}")
    return LearnedPredictor.train(kw.get("workload"), kw["samples"], kw["seed"], kw["model"],
                                  kw.get("lengths", "median"), kw.get("target_model"))


def make_qos_predictor(spec: dict[str, Any]) -> QoSBucketPredictor:
    """``{kind: learned_qos, path: P[, experts]}`` loads (``experts`` checks the file's); ``{kind: learned_qos,
    samples: N, seed: S[, experts, score_max]}`` trains now and writes nothing."""
    unknown = sorted(set(spec) - set(QOS_KEYS))
    if unknown:
        raise ConfigError(f"predictor: unknown key(s) {unknown} for kind 'learned_qos'; allowed keys: "
                          f"{sorted(QOS_KEYS)}")
    experts = spec.get("experts")
    if spec.get("path") is not None:
        extra = sorted(set(spec) - {"kind", "path", "experts"})
        if extra:
            raise ConfigError(f"predictor: 'path' loads a saved predictor; drop the training key(s) {extra}")
        return QoSBucketPredictor(str(spec["path"]), None if experts is None else list(experts))
    kw = {"samples": DEFAULT_SAMPLES, "seed": 0, **{k: v for k, v in spec.items() if k in ("samples", "seed")}}
    for k, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"predictor.{k}: expected a non-negative integer, got {v!r}")
    model, _ = train_qos_predictor(list(experts or QOS_EXPERTS), kw["samples"], kw["seed"],
                                   spec.get("score_max", 1.0))
    return QoSBucketPredictor(model)
