"""Block identities of conversations: chained prefix-block ids for turns that extend earlier turns.

The contract (:mod:`llmsim.engine.prefix_cache`): ``hash_ids[i]`` names the tokens ``[0, (i + 1) * hash_block)`` of a
request's sequence (prompt, then output), so equal ids at position ``i`` mean equal prefixes. A turn that
repeats the first ``s`` tokens of an earlier sequence keeps that sequence's ids of the ``s // hash_block`` hash
blocks wholly inside the shared part; every later block, including a partial block that the new turn extends,
holds new content and gets a new id from an :class:`IdCounter` (ids are never reused, so distinct content never
shares an id).

:class:`SessionIds` applies this to a trace whose rows name their conversation (BurstGPT's ``Session ID``),
keeping a bounded number of open conversations.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from llmsim.errors import ConfigError
from llmsim.workload.base import check_int

MAX_HASH_BLOCK = 2**20  # tokens per id: far above any real block (Mooncake 512), a guard against nonsense
DEFAULT_HASH_BLOCK = 16  # vLLM's block size: a partial hash block then loses at most 15 tokens of reuse
DEFAULT_MAX_SESSIONS = 4096


def check_hash_block(value: object, name: str = "hash_block") -> int:
    """Tokens per id, in [1, 2**20] (the engine keys a block by its offset in the hash block, 20 bits)."""
    return check_int(name, value, ge=1, le=MAX_HASH_BLOCK)


class IdCounter:
    """Fresh ids, 0, 1, 2, ...: one per new hash block, so an id never names two contents."""

    __slots__ = ("next",)

    def __init__(self, start: int = 0) -> None:
        self.next = start

    def take(self, n: int) -> range:
        """``n`` ids nobody has used."""
        first = self.next
        self.next = first + n
        return range(first, first + n)


def extend_ids(prev: Sequence[int], shared: int, total: int, hash_block: int, counter: IdCounter) -> list[int]:
    """Ids of a sequence of ``total`` tokens whose first ``shared`` tokens equal those of the sequence ``prev``
    names: ``prev``'s ids of the full hash blocks inside the shared part, then fresh ids up to
    ``ceil(total / hash_block)``."""
    keep = min(shared // hash_block, len(prev), -(-total // hash_block))
    ids = list(prev[:keep])
    ids.extend(counter.take(-(-total // hash_block) - keep))
    return ids


class SessionIds:
    """Ids for requests tagged with a conversation: a turn shares the previous turn's prompt + output when its
    prompt is at least that long, else the longest prefix of it that fits (its first ``prompt`` tokens).

    That is an assumption about logs that record the whole history as the prompt (BurstGPT conversation
    logs do): the trace has no token content, so only lengths can tell how much of a turn repeats the last.
    At most ``max_sessions`` conversations are remembered (least recently active forgotten first); a turn of a
    forgotten conversation starts afresh, so memory is bounded by ``max_sessions`` times the ids of one
    context (``(prompt + output) / hash_block``). A request without a session gets fresh ids only.
    """

    def __init__(self, hash_block: int = DEFAULT_HASH_BLOCK, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.hash_block = check_hash_block(hash_block)
        self.max_sessions = check_int("max_sessions", max_sessions, ge=1)
        self.counter = IdCounter()
        self.open: OrderedDict[str, tuple[list[int], int]] = OrderedDict()  # session -> (ids, tokens they cover)
        self.forgotten = 0  # conversations dropped by the cap (a later turn of one starts afresh)

    def assign(self, session: str | None, prompt: int, output: int) -> tuple[int, ...]:
        """The ids of one request (prompt + output) of ``session`` (None or '': no conversation)."""
        if prompt < 0 or output < 0:
            raise ConfigError(f"token counts must be >= 0, got prompt {prompt} and output {output}")
        total = prompt + output
        if not session:
            return tuple(self.counter.take(-(-total // self.hash_block)))
        prev = self.open.pop(session, None)
        if prev is None:
            ids = extend_ids((), 0, total, self.hash_block, self.counter)
        else:
            prev_ids, context = prev
            ids = extend_ids(prev_ids, min(context, prompt), total, self.hash_block, self.counter)
        self.open[session] = (ids, total)
        if len(self.open) > self.max_sessions:
            self.open.popitem(last=False)
            self.forgotten += 1
        return tuple(ids)


__all__ = ["DEFAULT_HASH_BLOCK", "DEFAULT_MAX_SESSIONS", "IdCounter", "SessionIds", "check_hash_block", "extend_ids"]
