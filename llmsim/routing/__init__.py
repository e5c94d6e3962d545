"""Routing policies behind one registry (``make_router(name)``): heuristics and the published systems' routers."""

import llmsim.routing.routebalance.predictors  # noqa: F401  (estimator knn, tpot_prior xgboost; lazy)
from llmsim.routing import heuristics, load, model_choice, quality, slo  # noqa: F401  (registers the routers)
from llmsim.routing.base import DEFER, DROP, ROUTERS, WAIT, Router, make_router, register_router
from llmsim.routing.prefix import routers as _prefix_routers  # noqa: F401  (registers the routers)
from llmsim.routing.qlm import router as _qlm_router  # noqa: F401  (registers the router)
from llmsim.routing.routebalance import router as _routebalance_router  # noqa: F401  (registers the router)

__all__ = ["DEFER", "DROP", "ROUTERS", "WAIT", "Router", "make_router", "register_router"]
