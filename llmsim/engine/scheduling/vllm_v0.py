"""vLLM V0 default scheduler: prefill-prioritised, an iteration runs prefills or decodes.

Follows ``vllm/core/scheduler.py::_schedule_default`` (v0.6): if nothing is swapped out, admit
waiting prompts FCFS while the token budget, ``max_num_seqs`` and the KV cache (prompt blocks plus
the watermark) allow (while requests are swapped out, only those whose KV landed from a prefill
instance: ``BatchPolicy.admissible``); if any were admitted the iteration is prefill-only. Otherwise every running
sequence decodes one token, preempting the most recently admitted ones when a new block is needed
and none is free; swapped-out sequences come back only in steps without preemption.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.engine.scheduling.base import BatchPolicy, Scheduled, register_batch_policy

if TYPE_CHECKING:
    from llmsim.engine.scheduling.base import Engine


@register_batch_policy
class VllmV0Policy(BatchPolicy):
    name = "vllm_v0"
    uses_watermark = True
    prefills_whole_prompts = True
    lazy_running = True  # after its prefill iteration every running request decodes: the cohort can carry them
    decodes_all_when_idle_queues = True  # (schedule -> _decode -> decode_all, below)

    @classmethod
    def default_max_num_batched_tokens(cls, max_model_len: int) -> int:
        """vLLM V0: a whole prompt must fit one iteration."""
        return max(max_model_len, 2048)

    def schedule(self, inst: Engine, now: float) -> Scheduled:
        out = Scheduled()
        if inst.waiting and (not inst.swapped or inst.waiting[0].blocks):  # (admissible: below)
            batch = out.batch
            budget = inst.max_batched
            nseq = len(inst.running)
            kv = inst.kv
            watermark = kv.watermark
            bs = kv.block_size
            for r in list(self.admissible(inst)):
                n_new = r.prompt_tokens + r.generated - r.computed
                hit = taken = 0
                if r.hash_ids is not None and kv.prefix is not None and not r.computed:
                    hit, taken = kv.prefix.lookup(r)  # prefix caching (inst.cached_prefix, inlined on this hot path)
                    n_new -= hit * bs
                if n_new > budget or nseq >= inst.max_seqs:
                    break
                need = kv.needed(r, hit * bs + n_new) - hit
                if kv.free - need - taken < watermark:
                    break
                inst.admit(r, n_new, need, now, hit)
                batch.append(r)
                budget -= n_new
                nseq += 1
            if batch:
                return out
        return self._decode(inst, now, out)

    def _decode(self, inst: Engine, now: float, out: Scheduled) -> Scheduled:
        running = inst.running
        if not inst.swapped and inst.decode_all(out, check=False):
            return out
        preempted = self._decode_with_preemption(inst, out)
        if not preempted and inst.swapped:
            out.transfer_blocks += self._swap_in(inst, now, out.batch)
        out.stable = not preempted and out.transfer_blocks == 0 and len(out.batch) == len(running)
        return out

    def _decode_with_preemption(self, inst: Engine, out: Scheduled) -> bool:
        inst.settle_running()  # this pass reads the running requests' counts
        running = inst.running
        batch = out.batch
        kv = inst.kv
        bs = kv.block_size
        preempted = False
        i = 0
        while i < len(running):
            r = running[i]
            need = 1 if r.computed % bs == 0 else 0
            victim = None
            while need > kv.free:
                victim = running[-1]
                out.transfer_blocks += inst.preempt_last()
                preempted = True
                if victim is r:
                    break
            if victim is r:
                break
            if need:
                kv.allocate(r, need)
            r.n_new = 1
            batch.append(r)
            i += 1
        return preempted

    def _swap_in(self, inst: Engine, now: float, batch: list) -> int:
        moved = 0
        kv = inst.kv
        bs = kv.block_size
        while inst.swapped and len(inst.running) < inst.max_seqs:
            r = inst.swapped[0]
            need = r.blocks + (1 if r.computed % bs == 0 else 0)
            if kv.free - need < kv.watermark:
                break
            moved += inst.swap_in(r, need)
            r.n_new = 1
            batch.append(r)
        return moved
