"""What the metrics read of the simulator, as protocols: the metrics room sits below the engine and the cluster
(data flows up, into the recorder), so it names the few attributes it reads instead of importing their classes.
:class:`llmsim.engine.instance.Instance`, :class:`llmsim.engine.config.EngineConfig` and
:class:`llmsim.cluster.Cluster` satisfy them; so does any stand-in with the same attributes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from llmsim.event_loop import SimEnv
    from llmsim.perf.profile import Profile


class EngineSettings(Protocol):
    """The engine arguments the instance table reads (an EngineConfig)."""

    @property
    def policy(self) -> str: ...

    @property
    def max_num_seqs(self) -> int: ...

    @property
    def max_num_batched_tokens(self) -> int | None: ...

    @property
    def max_model_len(self) -> int | None: ...

    @property
    def step_time_scale(self) -> float: ...


class MeasuredInstance(Protocol):
    """An engine's identity and counters over a run (an Instance): one row of ``instances.csv``."""

    @property
    def idx(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def profile(self) -> Profile: ...

    @property
    def config(self) -> EngineSettings: ...

    @property
    def kv_total(self) -> int: ...

    @property
    def finished(self) -> int: ...

    @property
    def iterations(self) -> int: ...

    @property
    def busy_time(self) -> float: ...

    @property
    def prefill_tokens(self) -> int: ...

    @property
    def tokens_out(self) -> int: ...

    @property
    def preemptions(self) -> int: ...

    @property
    def swap_outs(self) -> int: ...

    @property
    def prefix_queries(self) -> int: ...

    @property
    def prefix_hits(self) -> int: ...

    @property
    def prefix_evictions(self) -> int: ...


class Placement(Protocol):
    """Where an instance runs (an InstanceConfig): the device it shares with co-located ones, if any."""

    @property
    def device(self) -> str | None: ...


class MeasuredCluster(Protocol):
    """A cluster after a run: its engines and their placements, index by index."""

    @property
    def instances(self) -> Sequence[MeasuredInstance]: ...

    @property
    def instance_configs(self) -> Sequence[Placement]: ...


class Outcomes(Protocol):
    """Where finished and dropped requests are announced (a Recorder)."""

    def subscribe(self, on_finish: Callable[[Any], None] | None = None,
                  on_drop: Callable[[Any, str, float], None] | None = None) -> None: ...

    def unsubscribe(self, on_finish: Callable[[Any], None] | None = None,
                    on_drop: Callable[[Any, str, float], None] | None = None) -> None: ...


class RunningCluster(Protocol):
    """A cluster while it runs, as progress reads it: its outcomes, arrivals so far, and its clock."""

    @property
    def recorder(self) -> Outcomes: ...

    @property
    def num_arrived(self) -> int: ...

    @property
    def arrivals_done(self) -> bool: ...

    @property
    def env(self) -> SimEnv: ...
