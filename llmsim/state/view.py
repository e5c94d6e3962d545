"""The router's window on a cluster: what ``Router.route(request, view)`` may call.

Two implementations: :class:`llmsim.cluster.view.ClusterView` in simulation (live, or the last scrape with
``view_staleness``) and :class:`llmsim.state.state_view.StateView` over a :class:`ClusterState` alone (the live
router, and anything that only has a snapshot). :class:`RouterView` is what both offer; :class:`SimulatorView`
adds what only a simulated cluster knows or can do (model catalogs, prefix-cache hits, P/D roles, engine
operations), which routers that need it (QLM, prefix-aware routing) use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState
    from llmsim.state.model_host import ModelHostState

RequestRow = tuple[int, int, int, "float | None", str]  # (id, prompt tokens, generated, predicted output, state)


class RouterView(Protocol):
    """What every router may read, in simulation and in the live router."""

    num_instances: int
    mean_output_estimate: float  # mean output length of the requests finished so far (tokens)

    @property
    def now(self) -> float: ...

    @property
    def stale(self) -> bool: ...

    @property
    def central_queue_length(self) -> int: ...

    def state(self) -> ClusterState: ...

    def candidates(self, req: Request) -> list[int]: ...

    def queue_lengths(self) -> list[int]: ...

    def num_waiting(self) -> list[int]: ...

    def num_running(self) -> list[int]: ...

    def kv_used_fractions(self) -> list[float]: ...

    def kv_demand_fractions(self) -> list[float]: ...

    def work_left(self) -> list[float]: ...

    def throughput(self, now: float | None = None) -> list[float]: ...

    def requests(self, i: int) -> list[RequestRow]: ...


class SimulatorView(RouterView, Protocol):
    """What only a simulated cluster offers a router: models, prefix caches, roles and engine operations."""

    stage: str  # "prefill" or "decode": which stage of a disaggregated cluster is being routed

    def model_hosts(self) -> tuple[ModelHostState | None, ...]: ...

    def prefix_hit_tokens(self, i: int, req: Request) -> int: ...

    def block_size(self, i: int) -> int: ...

    def prefix_caching(self, i: int) -> bool: ...

    def roles(self) -> tuple[str, ...]: ...

    def evict(self, instance: int, request_id: int) -> None: ...

    def swap_out(self, instance: int, request_id: int, park: bool = False) -> None: ...

    def prefetch_model(self, instance: int, model: str) -> bool: ...
