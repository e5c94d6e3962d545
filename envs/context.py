"""What the env's plug-ins may read of it: the typed interfaces observation builders and rewards are handed.

An observation builder sees an :class:`ObservationContext`: the cluster's static facts, the predictor's outputs,
the router's own book of routed requests and the prefix-cache hits a router may ask for, plus the public
:class:`~llmsim.state.cluster_state.ClusterState` it is given at each decision (and any history it keeps itself).
So the same builder runs inside :class:`llmsim.envs.routing_env.RoutingEnv` and in front of real backends
(:class:`llmsim.envs.policy_router.DecisionContext`). A reward sees a :class:`RewardContext`: that, plus the
simulator's exact state and each request's hidden ground truth, by which it judges.

These live apart from the env so that builders and rewards never import the env that calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from llmsim.perf.models import ModelSpec
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState


class ObservationContext(Protocol):
    """What observation builders may read besides the ClusterState of the decision.

    ``models``: the distinct models in instance order; ``inst_model_idx[k]``: the index in ``models`` of instance
    k's model; ``predictions(req)``: predicted (output tokens, quality) of ``req`` on each model;
    ``routed_quality``: the predicted quality of each routed request on the model it was sent to;
    ``prefix_hit_tokens(k, req)``: prompt tokens of ``req`` instance k's prefix cache holds now."""

    num_instances: int
    instance_models: list[str]
    models: list[str]
    inst_model_idx: np.ndarray
    task_names: list[str]
    routed_quality: dict[int, float]

    def predictions(self, req: Request) -> tuple[np.ndarray, np.ndarray]: ...

    def prefix_hit_tokens(self, instance: int, req: Request) -> int: ...


class RewardContext(ObservationContext, Protocol):
    """What rewards may read: the observation context, the decision mode, and the simulator's truth.

    ``state()`` is what the agent's router observes (stale with ``view_staleness``); ``true_state()`` is the
    simulator's exact state, which rewards judge by; ``true_progress()`` is its ``(central_queue,
    ((num_requests, progress) per instance))`` without building it (what a per-tick backlog term reads);
    ``request(id)`` returns a request with its hidden ground truth (true output length, quality)."""

    model_specs: dict[str, ModelSpec]
    decision: str
    tick: float

    def state(self) -> ClusterState: ...

    def true_state(self) -> ClusterState: ...

    def true_progress(self) -> tuple[int, tuple[tuple[int, float], ...]]: ...

    def request(self, request_id: int) -> Request: ...
