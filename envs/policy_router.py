"""An exported policy (envs/exported.py) as an llmsim router: ``make_router("onnx", path=EXPORT_DIR)``.

``policy.name=onnx policy.kwargs.path=DIR`` in the llmsim CLI, ``{name: onnx, kwargs: {path: DIR}}`` as an
llmsim-evaluate baseline, or the live router: llmsim finds the class through the ``llmsim.routers`` entry point
(pyproject.toml), so llmsim never imports envs. ``route(req, view)`` reads only ``view.state()`` (the public
ClusterState) and ``view.num_instances``; the observation is built by the SAME envs builder the policy was trained
with (rebuilt from the manifest) on a :class:`DecisionContext`, the observation context of a router outside the
simulator, and the mask and the meaning of the chosen action are envs/actions.py's, shared with RoutingEnv.

Predictions come from the manifest's predictor spec (llmsim.envs.predictors.base). The oracle reads the request's own
``output_tokens`` / ``outputs_by_model``: in the simulator that is the ground truth (the same features as the
env); in front of real backends the live router sets ``output_tokens`` to the client's ``max_tokens``, so the
"oracle" is the client's bound. A noisy predictor draws from the router's own seed, not the env's: features
(and so actions) then differ from the env's draws. Ground truth ``request(id)`` is not available here.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.envs.actions import ActionSpec, action_mask, decode_action, env_action, slot_action, slot_mask
from llmsim.envs.exported import ExportedPolicy, read_manifest, resolve_zoo
from llmsim.envs.load_gate import costless_decision, parse_gate, unsure
from llmsim.envs.observations import ObsBuilder, make_obs
from llmsim.envs.predictors.base import (
    AblatedPredictor,
    NoisyOraclePredictor,
    OraclePredictor,
    Predictor,
    ZeroPredictor,
    make_predictor,
)
from llmsim.errors import ConfigError
from llmsim.perf.models import MODELS
from llmsim.request import Request
from llmsim.routing.base import DROP, WAIT, Router, kwarg_flag, make_router, register_router
from llmsim.routing.load import kv_tokens
from llmsim.state.cluster_state import LAYOUT_VERSION, ClusterState

log = logging.getLogger(__name__)

# constructor option -> the attribute a builder keeps it in, where the names differ (checked at export)
_ALIASES = {"cap_running": ("cap_r",), "cap_waiting": ("cap_w",), "prompt_scale": ("ps",), "out_scale": ("os",),
            "latency_scale": ("ls",), "request_features": ("request",), "min_decode_time": ("min_dec",),
            "rate": ("rate_mode",)}
_CACHE_MAX = 4096  # predictions kept per router (requests being decided again: tick mode, retries)


def builder_spec(builder: ObsBuilder) -> dict[str, Any]:
    """``{"kind": name, **constructor options}`` of a bound builder, so ``make_obs(spec)`` rebuilds it (agents/export
    checks that the rebuilt one equals the original)."""
    out: dict[str, Any] = {"kind": builder.name}
    for p in list(inspect.signature(type(builder).__init__).parameters.values())[1:]:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if p.name == "buckets" and hasattr(builder, "b0"):
            out[p.name] = [builder.b0, builder.b1]
            continue
        for attr in (*_ALIASES.get(p.name, ()), p.name):
            v = getattr(builder, attr, None)
            if v is not None and not callable(v):
                out[p.name] = _plain(v)
                break
        else:
            if p.default is inspect.Parameter.empty:
                raise ConfigError(f"observation {builder.name!r}: cannot record option {p.name!r} for an export")
            out[p.name] = _plain(p.default)
    return out


def predictor_spec(pred: Predictor, where: str = "env.predictor") -> str | dict[str, Any]:
    """The llmsim.envs.predictors.base spec of a predictor object; a learned one (torch or xgboost) is refused, also
    as an ablate predictor's base."""
    if type(pred) is AblatedPredictor:
        return {"kind": "ablate", "base": predictor_spec(pred.base, f"{where}.base"), "zero": list(pred.zero)}
    if type(pred) is OraclePredictor:
        return "oracle"
    if type(pred) is ZeroPredictor:
        return "zero"
    if type(pred) is NoisyOraclePredictor:
        return {"kind": "noisy", **{k: _plain(getattr(pred, k)) for k in
                                    ("len_sigma", "q_sd", "len_buckets", "len_max", "q_buckets", "q_max")}}
    raise ConfigError(f"{where}: a {type(pred).__name__} cannot be exported (only llmsim.envs.predictors.base' "
                      f"oracle, noisy, zero and ablate of these run outside the trainer; a learned predictor needs "
                      f"its own runtime)")


def noiseless(pred: Predictor) -> Predictor:
    """``pred`` without a noisy oracle's simulated error (its buckets stay), also as an ablate predictor's base."""
    if isinstance(pred, NoisyOraclePredictor):
        return dataclasses.replace(pred, len_sigma=0.0, q_sd=0.0)
    if isinstance(pred, AblatedPredictor):
        return AblatedPredictor(noiseless(pred.base), pred.zero)
    return pred


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    return v


class DecisionContext:
    """The :class:`~llmsim.envs.context.ObservationContext` (and reward context) of a router outside the simulator:
    static facts from the manifest, the ClusterState of the current decision, predictions cached per request, the
    router's routed-quality book, and prefix-cache hits from the router's view."""

    def __init__(self, ctx: dict[str, Any], predictor: Predictor) -> None:
        self.use_backends(ctx["instance_models"], ctx["models"])
        self.task_names: list[str] = list(ctx.get("task_names") or [])
        self.decision: str = str(ctx.get("decision", "arrival"))
        self.tick: float = float(ctx.get("tick", 0.02))
        self.predictor = predictor
        self.routed_quality: dict[int, float] = {}
        self.preds: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.current: ClusterState | None = None
        self.view: Any = None  # the router's view of the current decision (prefix hits: ClusterView.prefix_hit_tokens)

    def use_backends(self, instance_models: Sequence[str], models: Sequence[str] | None = None) -> None:
        """Decide for these backends (a slot export runs on any number of them, each of a model the policy knows):
        the models predicted for are ``models``, by default theirs in first-appearance order, as an env of these
        instances has them."""
        self.instance_models: list[str] = list(instance_models)
        self.num_instances = len(self.instance_models)
        self.models: list[str] = list(dict.fromkeys(self.instance_models) if models is None else models)
        self.inst_model_idx = np.array([self.models.index(m) for m in self.instance_models], dtype=np.int64)

    @property
    def model_specs(self) -> dict[str, Any]:
        """llmsim's ModelSpec of each model it knows (no builder reads these; the utility reward does)."""
        return {m: MODELS[m] for m in self.models if m in MODELS}

    def reset(self) -> None:
        self.routed_quality.clear()
        self.preds.clear()
        self.current = None

    def state(self) -> ClusterState:
        if self.current is None:
            raise ConfigError("DecisionContext.state(): no decision in progress")
        return self.current

    def true_state(self) -> ClusterState:
        """Outside the simulator the router's view is all there is."""
        return self.state()

    def true_progress(self) -> tuple[int, tuple[tuple[int, float], ...]]:
        s = self.state()
        return s.central_queue, tuple((i.num_requests, i.progress) for i in s.instances)

    def predictions(self, req: Request) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (output tokens, quality) on each model, once per request (as the env caches them)."""
        p = self.preds.get(req.id)
        if p is None:
            p = self.preds[req.id] = self.predictor.predict(req, self.models)
            if len(self.preds) > _CACHE_MAX:
                self.preds.popitem(last=False)
        return p

    def request(self, request_id: int) -> Request:
        raise ConfigError("an exported router has no ground truth of requests (rewards only, in the simulator)")

    def prefix_hit_tokens(self, instance: int, req: Request) -> int:
        """What the router's view says ``instance``'s prefix cache holds of ``req`` (a view without prefix caches,
        such as a ClusterState alone, cannot serve a policy trained with ``prefix_hit``)."""
        hits = getattr(self.view, "prefix_hit_tokens", None)
        if hits is None:
            raise ConfigError("observation.prefix_hit: the router's cluster view cannot tell prefix-cache hits "
                              "(no prefix_hit_tokens); train without prefix_hit or serve behind a view that has it")
        return hits(instance, req)

    def record_routed(self, req: Request, instance: int, state: ClusterState) -> None:
        """Keep the predicted quality of a routed request on its model (the graph state's running/waiting
        nodes read it); forget requests no longer on any instance once the book outgrows the cluster."""
        lens, quals = self.predictions(req)
        j = int(self.inst_model_idx[instance])
        req.predicted_output = float(lens[j])
        self.routed_quality[req.id] = float(quals[j])
        if len(self.routed_quality) > 2 * sum(i.num_requests for i in state.instances) + 256:
            live = {r.id for i in state.instances for r in i.requests}
            self.routed_quality = {k: v for k, v in self.routed_quality.items() if k in live or k == req.id}


@register_router
class ExportedRouter(Router):
    """Routes with the exported policy in ``path`` (an llmsim-export directory, or ``zoo:<name>``: a shipped router).

    ``mode``: greedy (argmax) or sample (categorical SAC only, seeded by ``seed``). ``models``: the backends'
    models in order, checked against the manifest at construction (otherwise at the first decision, from the
    ClusterState's instances). A manifest with a ``load_gate`` (envs/load_gate.py) lets its heuristic decide at
    light load, and above it wherever the policy is unsure (the gate's ``margin``). ``predictor_noise``: False
    keeps a ``noisy`` predictor's buckets but not its simulated error, for inputs that already are predictions
    (a live client's routing hints): the noise stands for a predictor's error in the simulated world."""

    name = "onnx"

    def __init__(self, seed: int = 0, path: str | None = None, mode: str = "greedy",
                 models: Sequence[str] | None = None, predictor_noise: bool = True, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        if not path:
            raise ConfigError("policy.kwargs.path: the onnx router needs an export directory (llmsim-export)")
        if mode not in ("greedy", "sample"):
            raise ConfigError(f"policy.kwargs.mode: {mode!r} is not greedy or sample")
        predictor_noise = kwarg_flag("predictor_noise", predictor_noise)
        self.path, self.mode, self.seed = resolve_zoo(path, "export"), mode, seed
        self.policy = _load(self.path)
        m = self.policy.manifest
        self.manifest = m
        self.spec, self.ctx, self.builder = from_manifest(self.path, m, seed)
        if not predictor_noise:
            self.ctx.predictor = noiseless(self.ctx.predictor)
        self.slots = slot_count(m, str(self.path))  # 0, or a slot export: any number of backends up to it
        check_layout(m, self.builder.bind(self.ctx), str(self.path))
        self.builder.reset(self.ctx)
        self.ctx.predictor.reset(seed)
        self.seen: set[int] = set()
        self.checked: tuple[str, ...] | None = None
        self.gate = parse_gate(m.get("load_gate"), f"{self.path / 'manifest.json'}: load_gate")
        self.fallback = None if self.gate is None else make_router(self.gate.router, seed=seed, **self.gate.kwargs)
        self.meter = None if self.gate is None else self.gate.meter()
        set_net = ((m.get("policy") or {}).get("network") or {}).get("set_net") or {}
        self.split_guide = str(set_net.get("guide", "")).startswith("dedicated_split")
        self.kv_seen: tuple[int, ...] = ()
        self.quality_warned = False
        if models is not None:
            self.check_backends(list(models))

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        if seed is not None:
            self.ctx.predictor.reset(seed)
        self.ctx.reset()
        self.builder.reset(self.ctx)
        self.seen.clear()
        if self.gate is not None:
            self.fallback.reset(seed)
            self.meter = self.gate.meter()

    def reseed_predictor(self, seed: int) -> None:
        """Restart the export's predictor from ``seed``. In the simulator a noisy predictor stands for the real
        one's errors, a property of the simulated world: seeded as the env's (``RoutingEnv.predictor_seed``), the
        router sees the predictions the env's policies see, so it decides as its checkpoint does."""
        self.ctx.predictor.reset(seed)
        self.ctx.preds.clear()

    def check_backends(self, models: list[str]) -> None:
        """Refuse backends whose count or models (in order) differ from the cluster the policy was trained on; a
        slot export takes any number up to its slots, of models it knows, and rebuilds its actions and rows for
        them."""
        check_backends(self.manifest, models, str(self.path))
        if self.slots:
            self.ctx.use_backends(models)
            self.builder.bind(self.ctx)
            self.spec = ActionSpec.build(self.spec.kind, models, self.spec.max_waiting)
            if self.gate is not None and "models" in self.gate.kwargs:  # its heuristic's per-instance models
                self.fallback = make_router(self.gate.router, seed=self.seed,
                                            **{**self.gate.kwargs, "models": list(models)})
        self.checked = tuple(models)

    def check_kv_order(self, state: ClusterState) -> None:
        """A split guide's large group is the last half of the instances by position (its observation carries a
        KV cache only through the seats it counts): one warning line for each new set of KV sizes (a backend's is
        known from its first scrape) that is not listed smallest first."""
        kv = tuple(kv_tokens(i) for i in state.instances)
        if kv == self.kv_seen:
            return
        self.kv_seen = kv
        if any(a > b for a, b in zip(kv, kv[1:])):
            log.warning("%s: its guide sends heavy requests to the last half of the backends, but their KV caches "
                        "are not listed smallest first (%s tokens): list the backends smallest cache first",
                        self.path, ", ".join(map(str, kv)))

    def route(self, req: Request, view: Any) -> int:
        state: ClusterState = view.state()
        if state.version != LAYOUT_VERSION:
            raise ConfigError(f"{self.path}: backends report ClusterState layout v{state.version}, the export reads "
                              f"v{LAYOUT_VERSION}")
        models = tuple(i.model for i in state.instances)
        if view.num_instances != len(models):
            raise ConfigError(f"{self.path}: the view has {view.num_instances} instances, its state {len(models)}")
        if models != self.checked:
            self.check_backends(list(models))
        if self.split_guide:
            self.check_kv_order(state)
        ctx = self.ctx
        ctx.current = state
        ctx.view = view
        if req.id not in self.seen:  # the env tells its builder of each arrival once
            self.seen.add(req.id)
            self.builder.on_arrival(ctx, req)
            if self.builder.reads_quality and req.quality_by_model is None:
                self.warn_no_quality()
        obs = self.builder.build(ctx, state, req)
        if self.meter is not None and self.meter.light(state):  # light load: the export's heuristic decides
            d = self.fallback.route(req, view)
        elif self.gate is not None and self.gate.tells:
            # its choice where that costs nothing, as it estimates (``costless``); told whatever is decided
            d = costless_decision(self.fallback, req, view) if self.gate.costless else None
            if d is None:
                d = self.learned(req, view, state, obs)
            self.fallback.remember(req, d)
        else:
            d = self.learned(req, view, state, obs)
        if d >= 0:
            ctx.record_routed(req, d, state)
        if d != WAIT:  # decided for good: forget it (a held request is offered again, its arrival told once)
            self.seen.discard(req.id)
        return d

    def warn_no_quality(self) -> None:
        """One warning line: the policy reads each request's predicted quality per model, and a request came
        without one (a live request without routing hints): it decides as if the quality were unknown (0)."""
        if not self.quality_warned:
            self.quality_warned = True
            log.warning("%s: the policy reads each request's quality per model, and requests come without it: it "
                        "decides as if every quality were 0 (send them as routing hints, "
                        "llmsim.quality_by_model; docs/serving.md)", self.path)

    def learned(self, req: Request, view: Any, state: ClusterState, obs: Any) -> int:
        """The policy's decision; with a gate ``margin`` (greedy mode), the gate's heuristic's decision wherever the
        policy prefers its own action to the heuristic's by less than the margin (envs/load_gate.py ``unsure``)."""
        spec, k, slots = self.spec, self.spec.n_choices, self.slots
        mask = action_mask(spec, req.prompt_tokens, state.instances)
        if slots:  # the backends on the first slots
            mask = slot_mask(mask, slots)
        if self.mode == "sample":
            a = self.policy.sample(obs, mask, self.rng)
        else:
            scores, greedy = self.policy.run(obs, mask)
            a = int(greedy)
            margin = 0.0 if self.gate is None else self.gate.margin_now(self.meter)
            if margin > 0.0:
                d = self.fallback.route(req, view)
                h = action_of(d, spec)
                if unsure(scores, a, slot_action(h, k, slots) if slots else h, margin):
                    return d
        a = env_action(a, k, slots) if slots else a
        return decode_action(a, spec, req.prompt_tokens, lambda: state.instances)


def action_of(decision: int, spec: ActionSpec) -> int:
    """The action that stands for a router's decision (an instance, WAIT or DROP): the inverse of
    :func:`~llmsim.envs.actions.decode_action` (an instance's model where the actions choose models)."""
    if decision == WAIT:
        return spec.wait_action
    if decision == DROP:
        return spec.drop_action
    if spec.by_model:
        return next(a for a, reps in enumerate(spec.replicas) if decision in reps)
    return decision


def from_manifest(path: Path, m: dict[str, Any], seed: int) -> tuple[ActionSpec, DecisionContext, ObsBuilder]:
    """The action layout, decision context and observation builder a manifest describes (registry names only:
    the predictor and the builder are looked up, never imported); a malformed section is one line naming it."""
    section = "actions"
    try:
        spec = ActionSpec.from_dict(m["actions"])
        section = "context"
        ctx = DecisionContext(m["context"], make_predictor(m["context"].get("predictor"), seed=seed))
        section = "observation.builder"
        builder = make_obs(dict(m["observation"]["builder"]))
    except ConfigError as e:
        raise ConfigError(f"{path / 'manifest.json'}: {section}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{path / 'manifest.json'}: {section} is malformed ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]})") from None
    return spec, ctx, builder


def slot_count(manifest: dict[str, Any], where: str = "export") -> int:
    """``actions.slots`` of a slot export (one policy for 1 to that many backends), 0 for an export of one
    cluster; ``actions.n`` must then be slots + 2."""
    actions = manifest["actions"]
    slots = actions.get("slots", 0)
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0 or (slots and actions.get("n") != slots + 2):
        raise ConfigError(f"{where}/manifest.json: actions.slots {slots!r}: expected a positive integer with "
                          f"actions.n = slots + 2 (or no slots: an export of one cluster)")
    return slots


def check_backends(manifest: dict[str, Any], models: list[str], where: str = "export") -> None:
    """One line naming both sides when the backends' count or models (in order) are not the export's; for a slot
    export, when there are more backends than slots or a model the policy does not know."""
    slots = slot_count(manifest, where)
    if slots:
        known = list(manifest["context"]["models"])
        if not 1 <= len(models) <= slots or any(m not in known for m in models):
            raise ConfigError(f"{where}: the policy runs on 1 to {slots} backends of models {known}, but the backends "
                              f"are {len(models)} instances {list(models)}")
        return
    want = list(manifest["context"]["instance_models"])
    if list(models) != want:
        raise ConfigError(f"{where}: the policy was trained on {len(want)} instances {want}, but the backends are "
                          f"{len(models)} instances {list(models)}")


def check_layout(manifest: dict[str, Any], space: Any, where: str = "export") -> None:
    """The observation the rebuilt builder produces has the export's shapes (one line naming both)."""
    obs = manifest["observation"]
    if hasattr(space, "spaces"):
        have: Any = {k: list(v.shape) for k, v in space.spaces.items()}
        want = obs.get("shapes")
    else:
        have, want = list(space.shape), obs.get("shape")
    if have != want:
        raise ConfigError(f"{where}: the policy's observation {obs['builder'].get('kind')!r} has shape {want}, but "
                          f"the builder rebuilt for these backends gives {have}")


_POLICIES: dict[tuple[str, float], ExportedPolicy] = {}


def _load(path: Path) -> ExportedPolicy:
    """One onnxruntime session per export (evaluation builds a router per episode)."""
    read_manifest(path)  # checked every time: a changed file is refused, not served from the cache
    key = (str(path.resolve()), (path / "manifest.json").stat().st_mtime)
    if key not in _POLICIES:
        _POLICIES[key] = ExportedPolicy.load(path)
    return _POLICIES[key]
