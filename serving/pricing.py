"""What a backend is priced as by the policies that price an instance by its model (qlm's estimator, shepherd's batch
times, routebalance's profile prior): resolved once per backend and served model name, never at each decision.

A backend's served name comes from its ``/v1/models`` (vLLM: the path it loaded, or any name): looking it up in
llmsim's registry, the local hub cache or the file system at every decision would probe the disk per request and,
for a name llmsim does not know, fail the same way each time. The outcome, a failure included, is kept until the
backend's model name changes (a readmitted backend may serve another model).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmsim.errors import LLMSimError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import ModelSpec, get_model
from llmsim.perf.profile import profile_for_instance
from llmsim.serving.config import BackendConfig, PolicyConfig

# routers that load an instance's profile by its model at their decisions (routebalance only with tpot_prior: profile;
# its default table source needs a static_tpot_ms entry for the others, checked at start)
PRICING_POLICIES = ("qlm", "shepherd")
FIX_KEYS = "gpu (the GPU it runs on) and llmsim_model (a registered name, a Hugging Face id or its config.json path)"


def prices_backends(policy: PolicyConfig) -> bool:
    """Whether the policy prices each backend by its model and GPU (a backend it cannot price fails its decisions)."""
    if policy.heuristic in PRICING_POLICIES:
        return True
    return policy.heuristic == "routebalance" and policy.kwargs.get("tpot_prior") == "profile"


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
        try:
            spec = get_model(name)
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
