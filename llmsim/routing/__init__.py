"""Routing policies behind one registry (``make_router(name)``): the heuristics and the published systems' routers.

One module per idea: ``heuristics`` (random, round robin, JSQ, least KV / work, power of two), ``load`` (load
balancing by predicted work), ``quality`` (routing by model quality), ``model_choice`` (a model picker, then a
dispatcher), ``slo`` (deadline-aware routing), ``prefix/`` (prefix-cache affinity), ``qlm/`` (QLM) and
``routebalance/`` (RouteBalance); ``samplers`` names the training data of the routers that learn from a sample.
Routers read the cluster through a view (``llmsim.state.view``: ``RouterView``, or ``SimulatorView`` for engine
operations and prefix hits). Importing this package registers every router.
"""

import llmsim.routing.prefix.routers
import llmsim.routing.qlm.router
import llmsim.routing.routebalance.predictors
import llmsim.routing.routebalance.router  # noqa: F401  (the imports above register the routers and estimators)
from llmsim.routing import heuristics, load, model_choice, quality, slo  # noqa: F401  (registers the routers)
from llmsim.routing.base import DEFER, DROP, ROUTERS, WAIT, Router, make_router, register_router

__all__ = ["DEFER", "DROP", "ROUTERS", "WAIT", "Router", "make_router", "register_router"]
