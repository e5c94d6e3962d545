"""What a backend is priced as by the policies that price an instance by its model (qlm's estimator, shepherd's batch
times, routebalance's profile prior): resolved once per backend and served model name, never at each decision.

A backend's served name comes from its ``/v1/models`` (vLLM: the path it loaded, or any name): looking it up in
llmsim's registry, the local hub cache or the file system at every decision would probe the disk per request and,
for a name llmsim does not know, fail the same way each time. The outcome, a failure included, is kept until the
backend's model name changes (a readmitted backend may serve another model). A served name that is a file path is
not read: a backend does not choose which of the router's files it opens (the config's ``model`` /
``policy_model`` / ``llmsim_model`` may name one).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmsim.emulator.model_names import looks_like_path, model_source
from llmsim.errors import LLMSimError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import ModelSpec, get_model
from llmsim.perf.profile import profile_for_instance
from llmsim.routing.routebalance.state import DEFAULT_TPOT_MS
from llmsim.serving.config import BackendConfig, PolicyConfig

# routers that load an instance's profile by its model at their decisions
PRICING_POLICIES = ("qlm", "shepherd", "routebalance")
FIX_KEYS = "gpu (the GPU it runs on) and llmsim_model (a registered name, a Hugging Face id or its config.json path)"


def prices_backends(policy: PolicyConfig) -> bool:
    """Whether the policy may price a backend by its model and GPU (a backend it cannot price fails its
    decisions)."""
    return policy.heuristic in PRICING_POLICIES


def needs_pricing(policy: PolicyConfig, model: str) -> bool:
    """Whether the policy prices a backend serving ``model`` from its profile: qlm and shepherd always,
    routebalance for a model without a ``static_tpot_ms`` entry (its defaults included) or with ``tpot_prior:
    profile``."""
    if policy.heuristic != "routebalance":
        return prices_backends(policy)
    if policy.kwargs.get("tpot_prior") == "profile":
        return True
    table = policy.kwargs.get("static_tpot_ms")
    return model not in DEFAULT_TPOT_MS and not (isinstance(table, dict) and model in table)


@dataclass(frozen=True)
class Pricing:
    """A backend's model as policies price it: ``spec`` (None: not resolved, ``problem`` says why, "" if none)."""

    model: str  # the model name it was resolved for
    spec: ModelSpec | None
    problem: str

    @property
    def priced(self) -> bool:
        return not self.problem


def resolve(cfg: BackendConfig, name: str) -> Pricing:
    """The backend's configured ``model_spec``, else its model ``name`` resolved as the simulator resolves
    ``cluster.instances[].model``; with its GPU, priced at some tensor parallelism. Never raises: a model or GPU
    llmsim does not know is the ``problem`` (one line)."""
    spec = cfg.model_spec
    if spec is None:
        if not name:
            return Pricing(name, None, "its model is not known yet (down at start and no 'model' in the config)")
        if cfg.model is None and cfg.policy_model is None and looks_like_path(name):
            return Pricing(name, None, f"its served name {name[:200]!r} is a file path, and the router reads no file "
                                       "a backend names (only one its config names)")
        try:
            spec = get_model(model_source(name))  # (a plain served name is never read as a file)
        except (LLMSimError, OSError, ValueError) as e:
            why = str(e).splitlines()[0]
            if why.startswith("unknown model"):  # (its list of every registered name is not for this log line)
                why = (f"llmsim does not know the model {name[:200]!r}: not a registered name, a Hugging Face id in "
                       "the local hub cache or a config.json path")
            return Pricing(name, None, why[:300])
    if not cfg.gpu:
        return Pricing(name, spec, "no gpu in its config (the GPU it runs on prices its steps)")
    try:
        get_gpu(cfg.gpu)
        profile_for_instance(spec, cfg.gpu)
    except (LLMSimError, OSError, ValueError) as e:
        return Pricing(name, spec, str(e).splitlines()[0][:300])
    return Pricing(name, spec, "")
