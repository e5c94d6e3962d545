"""Batch-formation policies, looked up by name from ``engine.policy``."""

from llmsim.engine.scheduling.base import BATCH_POLICIES, BatchPolicy, Scheduled, register_batch_policy
from llmsim.engine.scheduling.chunked import ChunkedPrefillPolicy
from llmsim.engine.scheduling.ordered import ChunkedSJFPolicy, VllmV0SJFPolicy
from llmsim.engine.scheduling.vllm_v0 import VllmV0Policy

__all__ = [
    "BATCH_POLICIES",
    "BatchPolicy",
    "ChunkedPrefillPolicy",
    "ChunkedSJFPolicy",
    "Scheduled",
    "VllmV0Policy",
    "VllmV0SJFPolicy",
    "register_batch_policy",
]
