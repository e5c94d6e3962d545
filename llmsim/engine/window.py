"""Sliding-window KV blocks: a windowed model's request holds only the blocks its attention window still reads.

vLLM V1 (project vLLM, ``SlidingWindowManager`` of its single-type KV cache managers) keeps each request's block
table as long as its context, but before a request's new tokens are allocated it frees the blocks no token from
now on attends to (``remove_skipped_blocks``): with ``c`` tokens computed and a window of ``w`` tokens, the first
``max(0, c - w + 1)`` tokens are skipped (``get_num_skipped_tokens``: the next token's window includes itself),
and every block wholly inside them, ``skipped // block_size``, returns to the free pool (a null block takes its
place in the table). New blocks are then allocated as for full attention, up to ``ceil((c + n_new) / block_size)``
table entries. So a request computing ``n`` tokens after ``c`` holds
``ceil((c + n) / block_size) - max(0, c - w + 1) // block_size`` blocks.

``llmsim.engine.kv.WindowedKVCache`` applies this to the engine's block accounting: ``r.blocks`` counts the blocks
held, the skipped ones are remembered per request, and its ``computed`` frees the blocks that left the window after
each stepped iteration (vLLM frees them at the next schedule, before allocating: the free count a batch policy sees
is the same, except that vLLM frees request by request in scheduling order). The decode fast path counts the same
frees in its runs (``llmsim.engine.window_run``), exactly as stepping; the decode cohort (``llmsim.engine.cohort``),
which keeps counts lazily from sums, keeps the frees as sums too on such a cache (``llmsim.engine.window_cohort``).

Where it applies (``build_kv_cache``): a model whose every layer uses the window. A window on only some layers
(vLLM's hybrid allocator then keeps one block group per kind of layer) keeps full-context accounting, and so does a
request with prefix-block ids under prefix caching (its cached blocks are the prefix cache's to count; vLLM frees
them too, keeping them cached, and a hit then needs ``ceil((w - 1) / block_size)`` contiguous cached blocks, which
``llmsim.engine.prefix_cache`` does not model): requests without ids, the common case, free their blocks.
"""

from __future__ import annotations


def skipped_blocks(computed: int, window: int, block_size: int) -> int:
    """Blocks of a request with ``computed`` tokens that no later token attends to (vLLM's rule, module doc)."""
    skipped = computed - window + 1
    return skipped // block_size if skipped > 0 else 0


def window_blocks(tokens: int, computed: int, window: int, block_size: int) -> int:
    """Blocks a request holds once ``tokens`` slots are allocated after ``computed`` computed tokens."""
    return -(-tokens // block_size) - skipped_blocks(computed, window, block_size)
