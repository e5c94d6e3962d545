"""Routing policies behind one registry (``make_router(name)``)."""

import llmsim.policies.routebalance_predictors  # noqa: F401  (estimator knn, tpot_prior xgboost; lazy)
from llmsim.policies import (  # noqa: F401  (registers the routers)
    heuristics,
    papers,
    papers_qos,
    prefix_aware,
    qlm,
    route_baselines,
    routebalance,
    slo_baselines,
)
from llmsim.policies.base import DEFER, DROP, ROUTERS, WAIT, Router, make_router, register_router

__all__ = ["DEFER", "DROP", "ROUTERS", "WAIT", "Router", "make_router", "register_router"]
