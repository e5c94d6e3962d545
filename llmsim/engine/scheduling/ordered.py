"""Batch policies that admit waiting requests in another order than FCFS.

Shortest-predicted-job-first: the waiting request with the least predicted work (prompt tokens still
to prefill + predicted output, ``request.predicted_output`` when a predictor set it, else the prompt
length alone) is admitted first; ties keep arrival order. A template for priority / EDF orders.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from llmsim.engine.scheduling.base import register_batch_policy
from llmsim.engine.scheduling.chunked import ChunkedPrefillPolicy
from llmsim.engine.scheduling.vllm_v0 import VllmV0Policy

if TYPE_CHECKING:
    from llmsim.engine.scheduling.base import Engine
    from llmsim.request import Request


def predicted_work(r: Request) -> float:
    pred = r.predicted_output if r.predicted_output is not None else 0.0
    return (r.prompt_tokens + r.generated - r.computed) + max(pred - r.generated, 0.0)


class _ShortestPredictedFirst:
    def admission_order(self, inst: Engine) -> Iterable[Request]:
        return sorted(inst.waiting, key=predicted_work)


@register_batch_policy
class VllmV0SJFPolicy(_ShortestPredictedFirst, VllmV0Policy):
    name = "vllm_v0_sjf"


@register_batch_policy
class ChunkedSJFPolicy(_ShortestPredictedFirst, ChunkedPrefillPolicy):
    name = "chunked_sjf"
