"""What a config's ``predictor`` value becomes: the envs' own predictors pass through, learned ones are built.

``oracle`` / ``noisy`` / ``zero`` / ``ablate`` (and their mappings) are :mod:`llmsim.envs.predictors.base`'s, built
by the env itself (an ``ablate`` of a learned predictor is built here); ``learned`` is the output-length bucket
predictor of "Intelligent Router for LLM Workloads" (:mod:`llmsim.envs.predictors.length_buckets`), ``learned_qos``
the QoS-aware edge router's score and length bucket predictors (:mod:`llmsim.envs.predictors.qos`). Training needs
the ``predict`` extra (xgboost / scikit-learn).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmsim.envs.predictors import length_buckets, qos
from llmsim.envs.predictors.base import PREDICTORS, AblatedPredictor, Predictor, ablated_outputs, under_base
from llmsim.envs.predictors.length_buckets import LearnedPredictor
from llmsim.envs.predictors.qos import DEFAULT_SAMPLES, QoSBucketPredictor, train_qos_predictor
from llmsim.envs.tasks import QOS_EXPERTS
from llmsim.errors import ConfigError

DEFAULT_LEARNED = {"samples": 20000, "seed": 0, "model": "xgboost"}
LEARNED_KEYS = ("kind", "path", "samples", "seed", "model", "workload", "lengths", "target_model")
QOS_KEYS = ("kind", "path", "samples", "seed", "experts", "score_max")
ABLATE_KEYS = ("kind", "base", "zero")


def make_agent_predictor(spec: Any) -> Any:
    """What env factories accept, from a config value.

    ``"oracle"`` / ``"noisy"`` / their mappings / a Predictor / None pass through (a non-dict mapping such as
    an OmegaConf node becomes a dict); ``{"kind": "learned", "path": P}`` loads a saved predictor;
    ``{"kind": "learned", "samples": N, "seed": s, "model": "xgboost"}`` (or just ``"learned"``) trains one
    now, on the WorkloadRouter mixture or on ``workload`` (an env workload mapping), and writes nothing to disk.
    ``{"kind": "learned_qos", ...}`` (or just ``"learned_qos"``): :func:`make_qos_predictor`.
    ``{"kind": "ablate", "base": B, "zero": [...]}``: :func:`make_ablated_predictor`."""
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
    if spec.get("kind") == "ablate":
        return make_ablated_predictor(spec)
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


def make_ablated_predictor(spec: dict[str, Any]) -> dict[str, Any] | AblatedPredictor:
    """``{kind: ablate, base: B, zero: [score] | [length] | [score, length]}`` checked; ``B`` goes through
    :func:`make_agent_predictor`, so a learned base is loaded or trained and the wrapper is built around it (an
    object); a base the env builds itself leaves the spec a mapping, as for the other env predictors."""
    unknown = sorted(set(spec) - set(ABLATE_KEYS))
    if unknown:
        raise ConfigError(f"predictor: unknown key(s) {unknown} for kind 'ablate'; allowed keys: "
                          f"{sorted(ABLATE_KEYS)}")
    zero = list(ablated_outputs(spec.get("zero")))
    if spec.get("base") is None:
        raise ConfigError("predictor.base: the ablate predictor needs the predictor it ablates (a name, a mapping "
                          "with 'kind' or a Predictor)")
    if isinstance(spec["base"], Mapping) and dict(spec["base"]).get("kind") == "ablate" or spec["base"] == "ablate":
        raise ConfigError("predictor.base: an ablate predictor cannot wrap another; list every output to zero in "
                          "one 'zero'")
    try:
        base = make_agent_predictor(spec["base"])
    except ConfigError as e:
        raise ConfigError(under_base(str(e))) from None
    if isinstance(base, Predictor):
        return AblatedPredictor(base, zero)
    return {"kind": "ablate", "base": base, "zero": zero}


def saved_files(kind: str, path: str | Path) -> list[Path]:
    """The files of the ``learned`` or ``learned_qos`` predictor saved at ``path``, its .json first (checked as loading
    checks them): what a copy of the predictor needs."""
    return (qos.saved_files if kind == "learned_qos" else length_buckets.saved_files)(path)
