"""The experiments ``llmsim-reproduce`` knows: papers and studies by name, the old spec ids as aliases.

Each entry names the module whose ``run(quick, out_dir, jobs, progress, size=None, **options)`` measures the
experiment and returns its claim rows; the module is imported only when that experiment is asked for (the papers
that train need torch, the others do not).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from llmsim.errors import ConfigError
from llmsim.registry import Registry


@dataclass(frozen=True)
class Experiment:
    """A paper reproduction or a study: its name, module, title, results page and old id."""

    name: str
    module: str
    title: str
    page: str          # docs/results/<page>
    alias: str = ""    # the old spec id (``llmsim-reproduce spec001`` still works)
    paper: bool = True  # a published paper (else an llmsim study)


EXPERIMENTS: Registry[Experiment] = Registry("experiment")
for _e in (
    Experiment("qos_edge", "experiments.papers.qos_edge",
               "QoS-Aware LLM Routing for Edge Computing with Multiple Experts (HAN + SAC router)", "qos_edge.md",
               "spec000"),
    Experiment("intelligent_router", "experiments.papers.intelligent_router",
               "Intelligent Router for LLM Workloads: Improving Performance Through Workload-Aware Scheduling",
               "intelligent_router.md", "spec001"),
    Experiment("best_effort", "experiments.papers.best_effort", "Learned Best-Effort LLM Serving",
               "best_effort.md", "spec002"),
    Experiment("qlm", "experiments.papers.qlm",
               "QLM: One Queue Is All You Need: Resolving Head-of-Line Blocking in LLM Serving", "qlm.md", "spec003"),
    Experiment("routebalance", "experiments.papers.routebalance",
               "RouteBalance: Fused Model Routing and Load Balancing for Heterogeneous LLM Serving",
               "routebalance.md", "spec004"),
    Experiment("prefix", "experiments.studies.prefix",
               "KV reuse: prefix caching and prefix-aware routing (Mooncake's 36.6 %)", "prefix_caching.md",
               paper=False),
    Experiment("disagg", "experiments.studies.disagg",
               "Prefill/decode disaggregation vs colocated serving (DistServe, Splitwise)", "disaggregation.md",
               paper=False),
):
    EXPERIMENTS.register(_e, name=_e.name)
ORDER = ("qos_edge", "intelligent_router", "best_effort", "qlm", "routebalance", "prefix", "disagg")
ALIASES = {EXPERIMENTS.get(n).alias: n for n in ORDER if EXPERIMENTS.get(n).alias}
MODULES = {n: EXPERIMENTS.get(n).module for n in ORDER}


def resolve(name: str) -> str:
    """An experiment's name from its name or alias; a ConfigError naming the choices otherwise."""
    name = ALIASES.get(name, name)
    EXPERIMENTS.get(name)
    return name


def load(name: str) -> ModuleType:
    """The experiment's module; a ConfigError (not an exit) when it is not in this checkout, so ``all`` goes on."""
    module = MODULES[name]
    try:
        return importlib.import_module(module)  # by name: the module is imported only when asked for
    except ModuleNotFoundError as e:
        if e.name == module:
            raise ConfigError(f"{name} is not available in this installation (no module {module})") from None
        raise
