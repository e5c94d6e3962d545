"""The env options' schema: what ``RoutingEnv`` and the testbed factories accept, checked like a config group.

The field types are llmsim's (:mod:`llmsim.schema`), so ``tick=0``, ``num_requests=1.5`` or
``time_limit=nan`` fail at construction with one line naming the option, as in the CLI.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from llmsim.schema import NonNegFloat, NonNegInt, PosFloat, PosInt, Schema

ACTIONS = ("instance", "instance_wait", "instance_drop", "model")


class EnvOptions(Schema):
    """Scalar options of :class:`envs.core.RoutingEnv` (instances, workload and the pluggable parts are
    checked by their own schemas and registries)."""

    where: ClassVar[str] = "env"
    num_requests: PosInt = 1000
    decision: Literal["arrival", "tick"] = "arrival"
    tick: PosFloat = 0.02
    tick_when_empty: bool = False
    action: Literal["instance", "instance_wait", "instance_drop", "model"] = "instance"
    time_limit: NonNegFloat | None = None
    max_waiting: NonNegInt | None = None
    fixed_workload_seed: NonNegInt | None = None
    metrics_interval: PosFloat = 1.0
    on_unservable: Literal["error", "drop"] = "drop"
    colocation_interference: NonNegFloat = 1.0
