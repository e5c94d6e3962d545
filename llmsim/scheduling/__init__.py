"""Batch-formation policies, looked up by name from ``engine.policy``."""

from llmsim.scheduling.base import BATCH_POLICIES, BatchPolicy, Scheduled, register_batch_policy
from llmsim.scheduling.chunked import ChunkedPrefillPolicy
from llmsim.scheduling.vllm_v0 import VllmV0Policy

__all__ = [
    "BATCH_POLICIES",
    "BatchPolicy",
    "ChunkedPrefillPolicy",
    "Scheduled",
    "VllmV0Policy",
    "register_batch_policy",
]
