"""Routing policies behind one registry (``make_router(name)``): the heuristics and the published systems' routers.

One module per idea: ``heuristics`` (random, round robin, JSQ, least KV / work, power of two), ``load`` (load
balancing by predicted work), ``split`` (the WorkloadRouter paper's dedicated small / large split), ``gated`` (one
router while the cluster is light, another once it is busy), ``quality`` (routing by model quality), ``model_choice``
(a model picker, then a dispatcher), ``slo`` (deadline-aware routing), ``prefix/`` (prefix-cache affinity), ``qlm/``
(QLM) and ``routebalance/`` (RouteBalance); ``samplers`` names the training data of the routers that learn from a
sample. Routers read the cluster through a view (``llmsim.state.view``: ``RouterView``, or ``SimulatorView`` for
engine operations and prefix hits). Importing this package registers every router; the ones whose modules need scipy's
solvers (SLO-aware baselines, QLM, RouteBalance) are imported when first asked for.
"""

from llmsim.routing import gated, heuristics, load, model_choice, quality, split  # noqa: F401  (registers the routers)
from llmsim.routing.base import DEFER, DROP, ROUTERS, WAIT, Router, make_router, register_router
from llmsim.routing.prefix import routers as prefix_routers  # noqa: F401  (registers the routers)

ROUTERS.register_lazy("edf", "llmsim.routing.slo:EDFRouter")
ROUTERS.register_lazy("shepherd", "llmsim.routing.slo:ShepherdRouter")
ROUTERS.register_lazy("qlm", "llmsim.routing.qlm.router:QLMRouter")
ROUTERS.register_lazy("routebalance", "llmsim.routing.routebalance.router:RouteBalanceRouter")

__all__ = ["DEFER", "DROP", "ROUTERS", "WAIT", "Router", "make_router", "register_router"]
