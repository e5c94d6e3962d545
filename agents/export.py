"""``llmsim-export checkpoint=DIR format=onnx [out=DIR]``: a trained router as ONNX + manifest (docs/export.md).

Writes ``policy.onnx`` (observation arrays + action mask in; masked scores and the greedy action out) and
``manifest.json`` (what the inputs mean, how to rebuild them with the envs' builders, what each action index
does, the cluster and predictor the policy expects, versions, the config hash and the training metrics) to
``out`` (default ``<checkpoint>/export``). envs/exported.py loads it with numpy + onnxruntime only and
envs/policy_router.py runs it as the llmsim router ``onnx``. Every policy type of agents/ exports: DDQN on a
flat vector (the Intelligent Router) or with model-choice actions (the Learned Best-Effort router), SAC over the
HAN graph state or a flat vector (the QoS-aware edge router), and the argmax-decoded continuous SAC. Before
writing the manifest the export runs a short rollout of the checkpoint's env and checks the ONNX actions against
the torch policy's. Needs the rl and export extras (``pip install 'llmsim[rl,export]'``; ``llmsim-export`` says so).
"""

from __future__ import annotations

import hashlib
import json
import platform
import tempfile
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
import torch
from pydantic import BeforeValidator, Field
from torch import nn

from llmsim.agents.checkpoint import for_env, load_policy_net, policy_input
from llmsim.agents.checkpoint_meta import check_compatible, read_meta
from llmsim.agents.env_setup import LEARNED, checkpoint_env, make_env
from llmsim.agents.nets import SetQNetwork, masked
from llmsim.agents.router_options import router_kwargs
from llmsim.agents.sac_nets import SACActor
from llmsim.cli.hydra_app import run_hydra_app
from llmsim.envs.actions import ActionSpec, slot_mask
from llmsim.envs.exported import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MASK_INPUT,
    OUTPUTS,
    ZOO_PREFIX,
    ExportedPolicy,
    file_sha256,
    resolve_zoo,
)
from llmsim.envs.load_gate import parse_gate
from llmsim.envs.observations import make_obs
from llmsim.envs.policy_router import builder_spec, predictor_spec
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError, load_yaml_file
from llmsim.routing import DROP, WAIT
from llmsim.schema import NonNegInt, Schema, not_bool
from llmsim.state.cluster_state import LAYOUT_VERSION

PROG = "llmsim-export"
FORMATS = ("onnx",)
# the ONNX opsets the exporter writes: torch's TorchScript exporter goes up to 20; below 9 the masked argmax graph
# has no operators (every policy type was checked from 9 to 20)
OPSET_MIN, OPSET_MAX = 9, 20
TIE_TOL = 1e-5  # two valid actions whose torch scores are this close are a tie (either argmax is correct)


class ExportConfig(Schema):
    """conf/export.yaml: what ``llmsim-export`` reads."""

    where: ClassVar[str] = ""
    checkpoint: str | None = None  # required; None only so that the message names the key
    format: str = "onnx"  # FORMATS; export() names the choices
    out: str | None = None
    overwrite: bool = False  # replace policy.onnx and manifest.json in an existing non-empty ``out``
    opset: Annotated[int, BeforeValidator(not_bool), Field(ge=OPSET_MIN, le=OPSET_MAX)] = 17
    check_steps: NonNegInt = 256
    # env options on top of the checkpoint's env, for the export's context and its self-check (a slot policy's
    # export knows the models of this env: env_overrides.experts=10 lets a QoSEdge export serve any of the ten
    # experts); the observation and the actions must still be the checkpoint's
    env_overrides: dict[str, Any] | None = None


class ExportModule(nn.Module):
    """The checkpoint's network with the observation flattening and action masking the router applies, as
    one graph: ``(*observation arrays, action_mask) -> (masked scores, argmax)``."""

    def __init__(self, net: nn.Module, n_obs_inputs: int) -> None:
        super().__init__()
        self.net, self.n_obs = net, n_obs_inputs

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        obs, mask = inputs[:self.n_obs], inputs[self.n_obs]
        if self.n_obs == 1:
            x = obs[0]
        else:  # GraphLayout.flatten: every array as float32, row-major, in the layout's key order
            x = torch.cat([o.reshape(o.shape[0], -1).to(torch.float32) for o in obs], dim=1)
        scores = masked(self.net(x), mask)
        return scores, scores.argmax(dim=-1)


def onnx_inputs(env: RoutingEnv, slots: int = 0) -> list[dict[str, Any]]:
    """Name, shape (``None`` = batch) and dtype of each graph input: the observation's arrays, then the mask (over
    the env's actions, or a slot policy's ``slots`` + 2)."""
    space = env.observation_space
    n = slots + 2 if slots else int(env.action_space.n)
    if hasattr(space, "spaces"):
        obs = [{"name": k, "shape": [None, *map(int, s.shape)], "dtype": np.dtype(s.dtype).name}
               for k, s in space.spaces.items()]
    else:
        obs = [{"name": "obs", "shape": [None, *map(int, space.shape)], "dtype": np.dtype(space.dtype).name}]
    return [*obs, {"name": MASK_INPUT, "shape": [None, n], "dtype": "bool"}]


def write_onnx(net: nn.Module, inputs: list[dict[str, Any]], path: Path, opset: int = 17) -> None:
    """TorchScript-based export (small static graphs: ~1 s, matches onnxruntime to ~1e-7; agents/han.py), with a
    dynamic batch axis on every input and output."""
    mod = ExportModule(net, len(inputs) - 1).eval()
    dummy = tuple(torch.zeros([2, *i["shape"][1:]], dtype=getattr(torch, i["dtype"])) for i in inputs)
    names = [i["name"] for i in inputs]
    axes = {k: {0: "batch"} for k in (*names, *OUTPUTS)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "Constant folding", UserWarning)
        torch.onnx.export(mod, dummy, str(path), input_names=names, output_names=list(OUTPUTS), dynamic_axes=axes,
                          opset_version=opset, dynamo=False)


def policy_type(meta: dict[str, Any]) -> tuple[str, str | None]:
    """(type, sampling): ddqn_flat / ddqn_best_effort / sac_han / sac_mlp / sac_argmax_han / sac_argmax_mlp."""
    arch = meta.get("arch")
    if not arch:
        if meta.get("set_net"):
            return "ddqn_set", None
        by_model = str(meta.get("actions", {}).get("kind", "")).startswith("model")
        return ("ddqn_best_effort" if by_model else "ddqn_flat"), None
    if arch.get("head") == "gaussian":
        return f"sac_argmax_{arch['encoder']}", None
    return f"sac_{arch['encoder']}", "softmax"


def action_meanings(env: RoutingEnv) -> list[dict[str, Any]]:
    """What each action index does: an instance (its model), a model choice (its replicas), wait, drop."""
    spec = env.actions
    out: list[dict[str, Any]] = []
    for a in range(spec.n_choices):
        if spec.by_model:
            out.append({"index": a, "type": "model", "model": env.models[a], "replicas": list(spec.replicas[a])})
        else:
            out.append({"index": a, "type": "instance", "instance": a, "model": env.instance_models[a]})
    return [*out, *extra_meanings(spec, spec.wait_action)]


def extra_meanings(spec: ActionSpec, wait: int) -> list[dict[str, Any]]:
    """The wait and drop entries of the action meanings, wait at index ``wait`` and drop after it."""
    return [{"index": wait, "type": "wait", "offered": spec.offer_wait, "router_returns": WAIT},
            {"index": wait + 1, "type": "drop", "offered": spec.offer_drop,
             "router_returns": DROP if spec.offer_drop else WAIT}]


def export_slots(net: nn.Module) -> int:
    """The instance slots of a policy that runs on any number of instances up to them (a set network over the
    padded ``instance_set`` observation, an actor over the expert slots of a padded graph), 0 for a policy of one
    cluster size. Such a policy exports in slots, so one export serves any number of backends up to ``slots``."""
    if isinstance(net, SetQNetwork):
        return int(net.n_max)
    if isinstance(net, SACActor) and net.slots is not None:
        return int(net.slots)
    return 0


def slot_actions(env: RoutingEnv, slots: int) -> dict[str, Any]:
    """``actions`` of a slot export: ``slots`` instance slots, wait, drop. The router lays the K backends it finds
    on the first K slots (llmsim.envs.actions slot_mask / env_action); ``kind`` and ``max_waiting`` are the env's."""
    spec = env.actions
    meaning = [{"index": k, "type": "instance", "instance": k} for k in range(slots)]
    return {"kind": spec.kind, "slots": slots, "n": slots + 2, "choices": slots, "wait": slots, "drop": slots + 1,
            "offer_wait": spec.offer_wait, "offer_drop": spec.offer_drop, "replicas": [],
            "max_waiting": spec.max_waiting, "meaning": [*meaning, *extra_meanings(spec, slots)],
            "instances": f"any number of backends from 1 to {slots}, each of a model in context.models"}


def config_hash(ckpt: Path, meta: dict[str, Any]) -> tuple[str, str]:
    """(sha256 of the resolved config as canonical JSON, its source): config.yaml, else checkpoint.json's env."""
    f = ckpt / "config.yaml"
    if f.is_file():
        cfg, src = load_yaml_file(f), "config.yaml"
    else:
        cfg, src = meta.get("env"), "checkpoint.json:env"
    blob = json.dumps(cfg, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest(), src


def versions() -> dict[str, str]:
    import onnx  # optional: the export extra
    import onnxruntime  # optional: the export extra

    try:
        llmsim_v = version("llmsim")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        llmsim_v = "unknown"
    return {"llmsim": llmsim_v, "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "numpy": np.__version__, "python": platform.python_version()}


def env_context(env: RoutingEnv, env_cfg: dict[str, Any]) -> dict[str, Any]:
    """What a router outside the simulator needs to rebuild the decision (llmsim.envs.policy_router.DecisionContext)."""
    return {"env_id": env_cfg.get("id", "routing"), "instance_models": list(env.instance_models),
            "instance_gpus": [c.profile.gpu.name for c in env.instance_configs], "models": list(env.models),
            "task_names": list(env.task_names), "predictor": predictor_spec(env.predictor, "checkpoint.json: env"
                                                                                              ".predictor"),
            "decision": env.decision, "tick": env.tick, "max_waiting": env.max_waiting, "max_wait_s": env.max_wait_s,
            "wait_fallback": env.wait_fallback, "view_staleness": env.view_staleness, "action_kind": env.action_kind}


def training_summary(meta: dict[str, Any]) -> dict[str, Any]:
    keys = ("agent", "label", "steps", "episodes", "updates", "best_score", "eval_metric", "seed", "evaluations",
            "versions")
    return {k: meta.get(k) for k in keys if k in meta}


def check_builder(env: RoutingEnv, spec: dict[str, Any]) -> None:
    """The builder rebuilt from ``spec`` is the env's (same options after binding), or the export is refused."""
    rebuilt = make_obs(dict(spec))
    rebuilt.bind(env)

    def opts(b: Any) -> dict[str, Any]:
        return {k: v for k, v in vars(b).items() if isinstance(v, int | float | str | bool | list | tuple)}

    if opts(rebuilt) != opts(env.obs_builder):
        raise ConfigError(f"observation {spec['kind']!r}: rebuilt from {spec} it differs from the trained env's "
                          f"({opts(rebuilt)} vs {opts(env.obs_builder)})")


def load_env(ckpt: Path, meta: dict[str, Any],
             overrides: dict[str, Any] | None = None) -> tuple[RoutingEnv, dict[str, Any]]:
    env_cfg = meta.get("env")
    if not isinstance(env_cfg, dict):
        raise ConfigError(f"{ckpt / 'checkpoint.json'}: key 'env' (the env config) missing; cannot rebuild the "
                          f"observation")
    env_cfg = {**env_cfg, **(overrides or {})}
    pred = env_cfg.get("predictor")
    kind = pred.get("kind") if isinstance(pred, dict) else pred
    if kind in LEARNED:
        raise ConfigError(f"{ckpt / 'checkpoint.json'}: env.predictor {kind!r} is a learned predictor (xgboost); "
                          f"an export runs without it - retrain with predictor oracle, noisy or zero")
    env = make_env(checkpoint_env(env_cfg, ckpt))  # an ablate of a learned base: the copy in the checkpoint folder
    check_compatible(meta, env, str(ckpt))
    return env, env_cfg


def rollout(env: RoutingEnv, steps: int, seed: int = 0) -> tuple[list[Any], np.ndarray]:
    """(observations, masks) of ``steps`` decisions of random valid actions (episodes restart as needed)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out, masks, ep = [], [], 0
    while len(out) < steps:
        m = info["action_mask"]
        out.append({k: v.copy() for k, v in obs.items()} if isinstance(obs, dict) else obs.copy())
        masks.append(m.copy())
        obs, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(m))))
        if term or trunc:
            ep += 1
            obs, info = env.reset(seed=seed + ep)
    return out, np.asarray(masks)


@torch.no_grad()
def torch_scores(net: nn.Module, obs: list[Any], masks: np.ndarray) -> np.ndarray:
    """The torch policy's masked scores of a batch (what QPolicy takes the argmax of)."""
    x = torch.stack([policy_input(net, o) for o in obs])
    return masked(net(x), torch.as_tensor(masks)).numpy()


def compare(ref_scores: np.ndarray, ref_actions: np.ndarray, got_scores: np.ndarray, got_actions: np.ndarray,
            tie_tol: float = TIE_TOL) -> dict[str, Any]:
    """Parity figures: identical actions, ties (the reference's two best valid scores within ``tie_tol``),
    mismatches outside ties, and the largest absolute score difference over finite entries."""
    finite = np.isfinite(ref_scores)
    if not np.array_equal(finite, np.isfinite(got_scores)):
        raise AssertionError("the masked (-inf) entries differ between the two policies")
    diff = float(np.abs(ref_scores[finite] - got_scores[finite]).max()) if finite.any() else 0.0
    top2 = np.sort(np.where(finite, ref_scores, -np.inf), axis=1)[:, -2:]
    ties = np.isfinite(top2[:, 0]) & (top2[:, 1] - top2[:, 0] <= tie_tol)
    same = ref_actions == got_actions
    return {"observations": int(len(same)), "identical_actions": int(same.sum()), "ties": int(ties.sum()),
            "mismatches_outside_ties": int((~same & ~ties).sum()), "max_abs_score_diff": diff}


def self_check(env: RoutingEnv, net: nn.Module, out: Path, steps: int, where: Path | None = None,
               slots: int = 0) -> dict[str, Any]:
    """The export written in ``out`` against the torch network on ``steps`` rollout decisions; refuses any real
    mismatch (``where``: the export directory to name in the message, when ``out`` is where it is staged; ``slots``:
    a slot export, whose masks are the env's laid on the slots)."""
    if steps <= 0:
        return {"observations": 0}
    obs, masks = rollout(env, steps)
    if slots:
        masks = np.stack([slot_mask(m, slots) for m in masks])
    ref = torch_scores(net, obs, masks)
    pol = ExportedPolicy.load(out)
    got = [pol.run(o, m) for o, m in zip(obs, masks)]
    res = compare(ref, ref.argmax(axis=1), np.stack([g[0] for g in got]), np.array([int(g[1]) for g in got]))
    if res["mismatches_outside_ties"] or res["max_abs_score_diff"] > 1e-3:
        raise ConfigError(f"{where or out}: the ONNX policy disagrees with the checkpoint on the env rollout: {res}")
    return res


def export_dir(ckpt: Path, out: str | Path | None, overwrite: bool) -> Path:
    """Where the export goes (``out``, default ``<checkpoint>/export``); refused when that is a file, or a
    non-empty directory without ``overwrite``."""
    dest = Path(out) if out else ckpt / "export"
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"out={dest}: an existing file; expected a directory for policy.onnx and {MANIFEST}")
    if dest.is_dir() and any(dest.iterdir()) and not overwrite:
        raise ConfigError(f"out={dest}: a directory that is not empty; choose a new out=DIR, or overwrite=true to "
                          f"replace its policy.onnx and {MANIFEST}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"out={dest}: cannot create its parent directory ({e.strerror})") from None
    return dest


def build_manifest(ckpt: Path, meta: dict[str, Any], env: RoutingEnv, env_cfg: dict[str, Any], onnx_file: Path,
                   opset: int, slots: int = 0) -> dict[str, Any]:
    """manifest.json for ``onnx_file`` (policy.onnx): docs/export.md lists its keys."""
    spec = builder_spec(env.obs_builder)
    inputs = onnx_inputs(env, slots)
    actions = slot_actions(env, slots) if slots else {**env.actions.to_dict(), "meaning": action_meanings(env)}
    ptype, sampling = policy_type(meta)
    digest, src = config_hash(ckpt, meta)
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "policy": {"type": ptype, "agent": meta.get("agent"), "label": meta.get("label"), "sampling": sampling,
                   "greedy": "argmax of the masked scores, first index on ties", "arch": meta.get("arch"),
                   "network": {k: meta[k] for k in ("obs_dim", "hidden", "dueling", "set_net") if k in meta}},
        "onnx": {"file": onnx_file.name, "sha256": file_sha256(onnx_file), "opset": opset, "inputs": inputs,
                 "outputs": [{"name": "scores", "shape": [None, actions["n"]], "dtype": "float32",
                              "masked": "-inf (unless no action is valid)"},
                             {"name": "action", "shape": [None], "dtype": "int64"}]},
        "observation": {**dict(meta["observation"]), "builder": spec, "keys": [i["name"] for i in inputs[:-1]],
                        "state_layout_version": LAYOUT_VERSION,
                        "normalisation": "inside the builder: see its options in builder (envs/observations)"},
        "actions": actions,
        "context": env_context(env, env_cfg), "env_config": env_cfg, "versions": versions(),
        "config_sha256": digest, "config_source": src, "checkpoint": str(ckpt.resolve()),
        "training": training_summary(meta),
        **export_gate(ckpt, meta, env, env_cfg),
    }


def export_gate(ckpt: Path, meta: dict[str, Any], env: RoutingEnv, env_cfg: dict[str, Any]) -> dict[str, Any]:
    """checkpoint.json's ``load_gate`` with its heuristic's options filled in from the env (the live router has no
    env to read them from), or nothing."""
    gate = parse_gate(meta.get("load_gate"), f"{ckpt / 'checkpoint.json'}: load_gate")
    if gate is None:
        return {}
    return {"load_gate": {**gate.model_dump(), "kwargs": router_kwargs(gate.router, gate.kwargs, env, env_cfg)}}


def export(checkpoint: str | Path, fmt: str = "onnx", out: str | Path | None = None, opset: int = 17,
           check_steps: int = 256, overwrite: bool = False, env_overrides: dict[str, Any] | None = None) -> Path:
    """Export checkpoint directory ``checkpoint``; returns the export directory.

    The export is written and checked in a staging directory beside ``out`` and moved in only once complete, so a
    failed export leaves ``out`` as it was."""
    ExportConfig(checkpoint=str(checkpoint), format=fmt, out=None if out is None else str(out), opset=opset,
                 check_steps=check_steps, overwrite=overwrite, env_overrides=env_overrides)  # one line naming a bad key
    if fmt not in FORMATS:
        raise ConfigError(f"format: {fmt!r} is not an export format; expected one of {list(FORMATS)}")
    if str(checkpoint).startswith(ZOO_PREFIX) and out is None:  # <checkpoint>/export would write into the zoo
        raise ConfigError(f"out: required when checkpoint is a zoo name ({checkpoint}); the zoo's own export is "
                          f"{resolve_zoo(checkpoint, 'checkpoint').parent / 'export'}")
    ckpt = resolve_zoo(checkpoint, "checkpoint")  # zoo:<name>: a shipped router's checkpoint (docs/zoo.md)
    meta = read_meta(ckpt)  # one line naming checkpoint.json when it is missing or another format
    env, env_cfg = load_env(ckpt, meta, env_overrides)
    check_builder(env, builder_spec(env.obs_builder))
    net = load_policy_net(ckpt, meta)
    slots = export_slots(net)
    if not slots:
        net = for_env(net, env)
    elif isinstance(net, SACActor):
        net = net.slot_actor()  # all its slots (an actor narrowed to some experts has fewer columns)
    dest = export_dir(ckpt, out, overwrite)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        stage = Path(tmp)
        write_onnx(net, onnx_inputs(env, slots), stage / "policy.onnx", opset)
        manifest = build_manifest(ckpt, meta, env, env_cfg, stage / "policy.onnx", opset, slots)
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
        manifest["export_check"] = self_check(env, net, stage, check_steps, dest, slots)
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
        dest.mkdir(exist_ok=True)
        for name in ("policy.onnx", MANIFEST):  # the manifest last: its sha256 names the new policy.onnx
            (stage / name).replace(dest / name)
    return dest


def main() -> None:
    def body(plain: dict, run_dir: str) -> None:
        cfg = ExportConfig.parse(plain)
        if not cfg.checkpoint:
            raise ConfigError("checkpoint: required (a checkpoint directory with checkpoint.json)")
        torch.set_num_threads(1)
        dest = export(cfg.checkpoint, cfg.format, cfg.out, cfg.opset, cfg.check_steps, cfg.overwrite, cfg.env_overrides)
        m = json.loads((dest / MANIFEST).read_text())
        chk = m.get("export_check", {})
        slots = m["actions"].get("slots")
        backends = f"any 1-{slots} backends" if slots else f"{len(m['context']['instance_models'])} backends"
        print(f"exported {m['policy']['type']} ({m['policy']['label']}) for {backends} to {dest}: policy.onnx + "
              f"{MANIFEST}; "
              f"self-check {chk.get('identical_actions')}/{chk.get('observations')} identical actions, "
              f"max |score diff| {chk.get('max_abs_score_diff', 0.0):.2g}")

    run_hydra_app("export", PROG, body)


if __name__ == "__main__":
    main()
