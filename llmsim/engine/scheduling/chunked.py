"""Chunked prefill (vLLM V1 / Sarathi-Serve): decodes first, then prefill chunks fill the budget.

Follows ``vllm/v1/core/sched/scheduler.py::schedule`` (v0.8+): running requests in order get their
next tokens (1 for a decode, a chunk of a partial prefill) within ``max_num_batched_tokens``; a
request that cannot get a block preempts the last running one (recompute, or swap if configured);
when nothing was preempted, swapped-out then waiting requests are admitted FCFS with chunks of the
remaining budget while ``max_num_seqs`` allows (waiting ones once nothing is swapped out, except those whose KV
landed from a prefill instance, which hold their blocks). No watermark (V1 has none). With prefix caching, the
prompt blocks a request is allocated for this step are cached at once (``KVCache.allocated``), as V1's
``KVCacheManager.allocate_slots`` caches them: a request admitted later in the same step reuses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.engine.scheduling.base import BatchPolicy, Scheduled, register_batch_policy

if TYPE_CHECKING:
    from llmsim.engine.scheduling.base import Engine
    from llmsim.perf.hardware import GpuSpec
    from llmsim.request import Request


BIG_GPU_BYTES = 70 * 1024**3  # vLLM's threshold for its larger batch defaults (device memory, GiB)


@register_batch_policy
class ChunkedPrefillPolicy(BatchPolicy):
    name = "chunked"
    uses_watermark = False
    prefills_whole_prompts = False

    @classmethod
    def default_max_num_batched_tokens(cls, max_model_len: int) -> int:
        """vLLM V1's chunked-prefill budget (``vllm serve``) on a GPU below :data:`BIG_GPU_BYTES` or an A100."""
        return 2048

    @classmethod
    def batch_limits(cls, max_model_len: int, gpu: GpuSpec | None, budget: int | None,
                     seats: int | None) -> tuple[int, int]:
        """vLLM's defaults for ``vllm serve`` (``EngineArgs.get_batch_defaults``, OPENAI_API_SERVER): on a GPU of at
        least 70 GiB other than an A100 (the name), 8,192 tokens and 1,024 seats, else this policy's default budget
        and 256; then, as ``_set_default_max_num_seqs_and_batched_tokens_args``, a default budget at most seats x
        ``max_model_len`` and default seats at most the budget. Values the user set are kept as they are."""
        big = gpu is not None and gpu.memory_bytes >= BIG_GPU_BYTES and "a100" not in gpu.name.lower()
        mbt = (8192 if big else cls.default_max_num_batched_tokens(max_model_len)) if budget is None else budget
        n = (1024 if big else 256) if seats is None else seats
        if budget is None:
            mbt = min(mbt, n * max_model_len)
        return mbt, (min(n, mbt) if seats is None else n)

    def schedule(self, inst: Engine, now: float) -> Scheduled:
        out = Scheduled()
        if (
            len(inst.running) <= inst.max_batched
            and not inst.swapped
            and not self._could_admit(inst, inst.max_batched - len(inst.running))
            and inst.decode_all(out)
        ):
            return out
        budget, preempted, all_decode = self._continue_running(inst, out)
        n_running_scheduled = len(out.batch)
        if not preempted:
            budget = self._swap_in(inst, out, budget)
            if not inst.swapped or inst.waiting and inst.waiting[0].blocks:  # (admissible: below)
                self._admit(inst, out, budget, now)
        out.stable = (
            not preempted
            and all_decode
            and out.transfer_blocks == 0
            and n_running_scheduled == len(out.batch) == len(inst.running)
        )
        return out

    @staticmethod
    def _continue_running(inst: Engine, out: Scheduled) -> tuple[int, bool, bool]:
        """Chunks for the running requests in admission order, preempting from the back when blocks run out;
        returns (token budget left, whether anything was preempted, whether every chunk is a decode)."""
        batch = out.batch
        kv = inst.kv
        running = inst.running
        budget = inst.max_batched
        preempted = False
        all_decode = True
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            remaining = r.prompt_tokens + r.generated - r.computed
            n_new = remaining if remaining < budget else budget
            if remaining != 1 or r.generated == 0:
                all_decode = False
            need = kv.needed(r, n_new)
            victim = None
            while need > kv.free:
                victim = running[-1]
                out.transfer_blocks += inst.preempt_last()
                preempted = True
                if victim is r:
                    break
            if victim is r:
                break
            kv.allocate(r, need)
            kv.allocated(r, n_new)
            r.n_new = n_new
            batch.append(r)
            budget -= n_new
            i += 1
        return budget, preempted, all_decode

    @staticmethod
    def _swap_in(inst: Engine, out: Scheduled, budget: int) -> int:
        """Swapped requests come back, oldest first, while their blocks fit; returns the budget left."""
        kv = inst.kv
        while inst.swapped and budget > 0 and len(inst.running) < inst.max_seqs:
            r = inst.swapped[0]
            remaining = r.prompt_tokens + r.generated - r.computed
            n_new = remaining if remaining < budget else budget
            need = kv.needed(r, n_new) + r.blocks
            if need > kv.free:
                break
            out.transfer_blocks += inst.swap_in(r, need)
            kv.allocated(r, n_new)
            r.n_new = n_new
            out.batch.append(r)
            budget -= n_new
        return budget

    def _admit(self, inst: Engine, out: Scheduled, budget: int, now: float) -> None:
        """Waiting requests get prefill chunks, in admission order, while budget, seats and blocks allow (while
        requests are swapped out, only those whose KV landed here: ``BatchPolicy.admissible``)."""
        kv = inst.kv
        running = inst.running
        for r in list(self.admissible(inst)):
            if budget <= 0 or len(running) >= inst.max_seqs:
                break
            hit, taken = self._cached(inst, r)
            remaining = r.prompt_tokens + r.generated - r.computed - hit * kv.block_size
            n_new = remaining if remaining < budget else budget
            need = kv.needed(r, hit * kv.block_size + n_new) - hit
            if need + taken > kv.free:
                break
            inst.admit(r, n_new, need, now, hit)
            kv.allocated(r, n_new)
            out.batch.append(r)
            budget -= n_new

    def _could_admit(self, inst: Engine, budget: int) -> bool:
        """Whether the head of the waiting queue might get a chunk after the running decodes.

        Conservative (ignores the decodes' new blocks): True sends the step down the general path.
        """
        if not inst.waiting or budget <= 0 or len(inst.running) >= inst.max_seqs:
            return False
        r = next(iter(self.admission_order(inst)))
        hit, taken = self._cached(inst, r)
        bs = inst.kv.block_size
        remaining = r.prompt_tokens + r.generated - r.computed - hit * bs
        n_new = remaining if remaining < budget else budget
        return inst.kv.needed(r, hit * bs + n_new) - hit + taken <= inst.kv.free

    @staticmethod
    def _cached(inst: Engine, r: Request) -> tuple[int, int]:
        """Prefix-cache hit of a fresh waiting request (blocks, of which free now); (0, 0) otherwise."""
        if r.hash_ids is None or r.computed or inst.kv.prefix is None:
            return 0, 0
        return inst.cached_prefix(r)
