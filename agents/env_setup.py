"""The env a router is trained on: a ``conf/env`` mapping plus the run's ``predictor``.

A learned predictor (``learned``: the Intelligent Router's output-length buckets, envs/predictors/length_buckets.py;
``learned_qos``: the QoS-aware edge router's quality and length buckets, envs/predictors/qos.py) is fitted once by
:func:`env_config`, saved in the run directory, and loaded by :func:`make_env` in every worker process, so the
worker envs, the evaluation env and the checkpoint all refer to the same file (JSON and xgboost's UBJ: a
scikit-learn predictor, which saves only by pickle, is refused before it is fitted). The learned base of an
``ablate`` predictor (``{kind: ablate, base: {kind: learned_qos, ...}, zero: [score]}``) is fitted and saved the same
way, and the wrapper built around it in every env, as the Python API's ``make_agent_predictor`` does. A randomised
run's slot envs (:func:`make_slot_env`) load it once per process and share it across their episodes' envs.

A checkpoint is shipped with its predictor: :func:`ship_predictor` copies the saved files into the checkpoint folder
and records their path relative to it, and :func:`checkpoint_env` resolves that path against the folder wherever it
has been moved or copied.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from llmsim.envs.predictors.base import under_base
from llmsim.envs.predictors.from_config import make_ablated_predictor, make_agent_predictor, saved_files
from llmsim.envs.predictors.length_buckets import SKLEARN_NOT_SAVED
from llmsim.envs.randomize import RandomizeConfig, SlotEnv
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError

LEARNED = ("learned", "learned_qos")  # predictor kinds that are fitted models (not the env's oracles)
PREDICTOR_FILES = {"learned": "predictor.json", "learned_qos": "qos_predictor.json"}  # in a run or checkpoint folder


def is_learned(spec: Any) -> bool:
    """A predictor spec that names a fitted model (``learned`` / ``learned_qos``, or a mapping of that kind)."""
    return spec in LEARNED or (isinstance(spec, dict) and spec.get("kind") in LEARNED)


def is_learned_ablation(spec: Any) -> bool:
    """An ``ablate`` predictor spec whose base is a fitted model (the env builds only the others)."""
    return isinstance(spec, dict) and spec.get("kind") == "ablate" and is_learned(spec.get("base"))


def with_predictor(env_cfg: dict[str, Any]) -> dict[str, Any]:
    """The mapping with a ``predictor: {kind: learned, path: ...}`` entry (or an ``ablate`` of one) loaded into its
    Predictor object, which the envs take as it is."""
    cfg = dict(env_cfg)
    pred = cfg.get("predictor")
    if is_learned(pred) or is_learned_ablation(pred):
        cfg["predictor"] = make_agent_predictor(pred)
    return cfg


def make_env(env_cfg: dict[str, Any]) -> RoutingEnv:
    """One env from a conf/env mapping (picklable through functools.partial, for worker processes); a learned
    predictor is loaded here (:func:`with_predictor`)."""
    return make_from_config(with_predictor(env_cfg))


def make_slot_env(env_cfg: dict[str, Any], randomize: RandomizeConfig | None = None,
                  scenarios: list[dict[str, Any]] | None = None) -> SlotEnv:
    """A slot env (envs/randomize.py) from a conf/env mapping, drawing (``randomize``) or listing (``scenarios``) its
    episodes' scenarios; a learned predictor is loaded once here and shared by every episode's env."""
    return SlotEnv(with_predictor(env_cfg), randomize, scenarios)


def fitted(spec: Any, run_dir: Path) -> Any:
    """A learned predictor spec to be trained, fitted now and saved in ``run_dir``: ``{kind, path}`` of its file
    (a spec with a path, or not learned, as it is)."""
    if not is_learned(spec) or (isinstance(spec, dict) and spec.get("path")):
        return spec
    kind = spec if isinstance(spec, str) else spec["kind"]
    if isinstance(spec, dict) and spec.get("model") == "sklearn":  # refused before the fit, not after it
        raise ConfigError(f"predictor.model=sklearn: {SKLEARN_NOT_SAVED}")
    run_dir.mkdir(parents=True, exist_ok=True)
    pred = make_agent_predictor(spec)
    path = run_dir / ("qos_predictor.json" if kind == "learned_qos" else "predictor.json")
    (pred.model if kind == "learned_qos" else pred.bp).save(path)
    return {"kind": kind, "path": str(path)}


def env_config(env: dict[str, Any], predictor: Any, run_dir: Path) -> dict[str, Any]:
    """The env mapping with the run's ``predictor`` applied (None: the env's own). A learned predictor to be
    trained is fitted here and saved in ``run_dir``; the mapping then names its file."""
    env_cfg = dict(env)
    spec = predictor
    if spec is None:
        return env_cfg
    if is_learned_ablation(spec):
        make_ablated_predictor({**spec, "base": "zero"})  # its own keys checked before the base is fitted
        try:
            spec = {**spec, "base": fitted(spec["base"], run_dir)}
        except ConfigError as e:
            raise ConfigError(under_base(str(e))) from None
    env_cfg["predictor"] = fitted(spec, run_dir)
    return env_cfg


def learned_part(spec: Any, where: str, change: Any) -> Any:
    """``spec`` with ``change(saved, where)`` applied to its saved learned predictor (``{kind, path}``), also as an
    ``ablate`` predictor's base; any other spec as it is."""
    if is_learned_ablation(spec):
        return {**spec, "base": learned_part(spec["base"], f"{where}.base", change)}
    if is_learned(spec) and isinstance(spec, dict) and spec.get("path"):
        return change(spec, where)
    return spec


def ship_predictor(env_cfg: dict[str, Any], ckpt_dir: Path) -> dict[str, Any]:
    """The env mapping checkpoint ``ckpt_dir`` records: a saved learned predictor's files are copied into the folder,
    and its path is recorded relative to it (:func:`checkpoint_env` resolves it wherever the folder goes)."""
    def ship(spec: dict[str, Any], where: str) -> dict[str, Any]:
        name = PREDICTOR_FILES[spec["kind"]]
        files = saved_files(spec["kind"], spec["path"])
        clash = [f.name for f in files[1:] if f.name in (name, "checkpoint.json")]
        if clash:
            raise ConfigError(f"{where}.path {spec['path']}: its model file {clash[0]!r} would overwrite a file of "
                              f"the checkpoint; save the predictor again (its model files are named after it)")
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        for src, dst in zip(files, [ckpt_dir / name, *(ckpt_dir / f.name for f in files[1:])], strict=True):
            if not dst.exists() or not src.samefile(dst):
                shutil.copyfile(src, dst)
        return {**spec, "path": name}

    pred = env_cfg.get("predictor")
    return {**env_cfg, "predictor": learned_part(pred, "env.predictor", ship)} if pred is not None else env_cfg


def checkpoint_env(env_cfg: dict[str, Any], ckpt_dir: str | Path) -> dict[str, Any]:
    """Checkpoint ``ckpt_dir``'s recorded env mapping with its learned predictor's path resolved against the folder
    (an absolute path, as older checkpoints recorded, as it is); a missing file is one line naming both."""
    def resolve(spec: dict[str, Any], where: str) -> dict[str, Any]:
        recorded = Path(str(spec["path"]))
        path = recorded if recorded.is_absolute() else Path(ckpt_dir).absolute() / recorded
        if not path.exists():
            raise ConfigError(f"{Path(ckpt_dir) / 'checkpoint.json'}: {where}.path {str(recorded)!r}: no such "
                              f"predictor file ({path}); expected the learned predictor the checkpoint was trained "
                              f"with, saved in its folder")
        return {**spec, "path": str(path)}

    pred = env_cfg.get("predictor")
    return {**env_cfg, "predictor": learned_part(pred, "env.predictor", resolve)} if pred is not None else env_cfg
