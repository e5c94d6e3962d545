"""What one stepped iteration computes, as the step-time model wants it (``Profile.step_time``'s arguments)."""

from __future__ import annotations

from math import log as _log
from typing import TYPE_CHECKING, Any

from llmsim.engine.decode_times import DecodeTimes  # (the engine's, given to sample_tokens)
from llmsim.errors import LLMSimError

if TYPE_CHECKING:
    from llmsim.perf.decode_skew import DecodeSkew
    from llmsim.perf.profile import Profile
    from llmsim.request import Request


def stepped_cost(batch: list[Request], owner: str, policy: str) -> tuple[int, int, int, int, int]:
    """(tokens, decodes, decode context, sum of chunk^2, sum of chunk * cached) of a batch: a decode is a request
    computing its one next token; every other request prefills a chunk of ``n_new`` tokens. A chunk larger than the
    tokens left (or negative) is the batch policy's error, named with the instance ``owner``."""
    n_tokens = n_decode = decode_ctx = c2 = cp = 0
    for r in batch:
        n = r.n_new
        n_tokens += n
        if n == 1 and r.generated > 0 and r.computed + 1 == r.prompt_tokens + r.generated:
            n_decode += 1
            decode_ctx += r.computed + 1
        else:
            if n < 0 or r.computed + n > r.prompt_tokens + r.generated:
                raise LLMSimError(
                    f"instance {owner}: batch policy {policy!r} scheduled request {r.id} for {n} token(s) with "
                    f"{r.computed} of {r.prompt_tokens + r.generated} computed; expected 0 <= n_new <= the tokens left"
                )
            c2 += n * n
            cp += n * r.computed
    return n_tokens, n_decode, decode_ctx, c2, cp


def decode_skew_of(profile: Profile) -> DecodeSkew | None:
    """The profile's skewed-decode correction (llmsim.perf.decode_skew), None for most profiles: the engine then
    never looks at a batch's longest context."""
    return getattr(profile, "decode_skew", None)


def without_decode_skew(profile: Profile) -> Profile:
    """``profile`` without its skewed-decode term (the summed-context model alone: what-if replays and capacity
    searches); a profile without one is returned as it is."""
    if decode_skew_of(profile) is None:
        return profile
    return profile.without_decode_skew()  # type: ignore[attr-defined]  # (a measured profile: the only kind with one)


def stepped_time(profile: Profile, batch: list[Request], n_tokens: int, c2: int, cp: int, n_decode: int,
                 decode_ctx: int) -> float:
    """The step time of a stepped batch (``stepped_cost``'s sums); with a ``decode_skew`` profile and several
    decodes, plus the term of their longest and shortest contexts (a second pass, for those profiles only)."""
    dt = profile.step_time(n_tokens, len(batch), c2, cp, n_decode, decode_ctx)
    skew = decode_skew_of(profile)
    if skew is not None and n_decode > 1:
        hi, lo = 0, 1 << 62
        for r in batch:
            if r.n_new == 1 and r.generated > 0 and r.computed + 1 == r.prompt_tokens + r.generated:  # (a decode)
                c = r.computed + 1
                if c > hi:
                    hi = c
                if c < lo:
                    lo = c
        dt += skew.extra(n_decode, decode_ctx, hi, lo, n_tokens > n_decode)
    return dt


def sample_tokens(batch: list[Request], now: float, rec: Any, log: DecodeTimes) -> tuple[int, list[Request]]:
    """Apply a stepped iteration that ended at ``now`` to its requests: the computed tokens, and a sampled token for
    each request whose computed tokens reach its context, with its inter-token gap in ``rec`` (the Recorder) and
    ``now`` in the engine's ``log`` if some request sampled a token after its first other than by a re-prefill
    (after a recompute preemption or an eviction). Returns (tokens sampled, requests that reached their target)."""
    hist, inv, off, lo = rec.itl_hist, rec.ITL_INV, rec.ITL_OFFSET, rec.ITL_MIN  # Recorder.itl, inlined
    done = []
    out = gaps = resumed = 0
    pv, pb = -1.0, 0  # the last gap and its bin: a batch's decoders mostly share their last token's time
    for r in batch:
        n = r.n_new
        c = r.computed + n
        r.computed = c
        if c == r.prompt_tokens + r.generated:
            r.generated += 1
            out += 1
            if r.first_token < 0:
                r.first_token = now
            else:
                v = now - r.last_token_time
                if v != pv:
                    pv, pb = v, int(_log(v) * inv) + off if v > lo else 0
                hist[pb] += 1
                gaps += 1
                if n > 1:
                    resumed += 1  # (a re-prefill's token: recomputed, no decode)
            r.last_token_time = now
            if r.generated >= r.target_tokens:
                done.append(r)
    if gaps:
        rec.itl_count += gaps
        if gaps > resumed:
            log.add(now)
    return out, done
