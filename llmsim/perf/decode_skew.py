"""Decode attention under skewed KV lengths: the measured correction to the summed-context model.

A profile prices a batch's decode attention as linear in its summed context, which is the time of a batch whose
``n`` sequences all have the mean context ``t_mean``. LLMServingSim's profiler measured real skewed batches
(``skew.csv``: ``nb`` of ``n`` sequences long, the rest short) against that and against every sequence at the
longest context (``t_max``): the measured time is ``t_mean + alpha * (t_max - t_mean)``. With the summed-context
model, ``t_max - t_mean = per_ctx_token * (n * max_ctx - sum_ctx)``, so the correction is

    alpha * per_ctx_token * (n * max_ctx - sum_ctx)

with ``alpha`` fitted from the operator tables (llmsim.profiles.providers.skew):

* a decode-only batch: ``alpha = pure`` (a constant near 0.03);
* a batch with a prefill chunk (FlashAttention's varlen kernel shares the launch): ``alpha = mixed * skew_rate +
  mixed_per_inv_n / n``, where ``skew_rate = (mean - min) / (max - min)`` is the long sequences' share (``nb / n``
  for a two-length batch);

clamped to [0, 1] (the batch can be no faster than all-mean and no slower than all-max). Along a decode run of
fixed ``n`` both ``n * max - sum`` and the skew rate stay constant (every context grows by one per iteration), so
the fast path folds the term once per run.
"""

from __future__ import annotations

import math
from pathlib import Path

from llmsim.errors import ProfileError

KEYS = ("pure", "mixed", "mixed_per_inv_n")


def _clamp(a: float) -> float:
    return 0.0 if a < 0.0 else 1.0 if a > 1.0 else a


class DecodeSkew:
    """The ``decode_skew`` section of a profile: ``alpha`` by regime, applied to ``per_ctx_token``."""

    __slots__ = ("pure", "mixed", "mixed_per_inv_n", "per_ctx", "_pure_rate")

    def __init__(self, pure: float, mixed: float, mixed_per_inv_n: float, per_ctx: float) -> None:
        self.pure, self.mixed, self.mixed_per_inv_n = pure, mixed, mixed_per_inv_n
        self.per_ctx = per_ctx  # the profile's decode_attention.per_ctx_token (seconds per KV token read)
        self._pure_rate = _clamp(pure) * per_ctx  # seconds per token of spread in a decode-only batch

    def alpha(self, n: int, sum_ctx: int, max_ctx: int, min_ctx: int, mixed: bool) -> float:
        """The fraction of ``t_max - t_mean`` a batch of ``n`` decodes adds (``mixed``: a prefill chunk too)."""
        if not mixed:
            return _clamp(self.pure)
        gap = n * (max_ctx - min_ctx)
        rate = (sum_ctx - n * min_ctx) / gap if gap > 0 else 0.0
        return _clamp(self.mixed * rate + self.mixed_per_inv_n / n)

    def pure_extra(self, spread: int) -> float:
        """Seconds a decode-only batch adds for ``spread = n * max_ctx - sum_ctx`` (constant along a decode run)."""
        return self._pure_rate * spread

    def extra(self, n: int, sum_ctx: int, max_ctx: int, min_ctx: int, mixed: bool) -> float:
        """Seconds a batch of ``n`` decodes (context sum, max, min) adds to the summed-context time."""
        spread = n * max_ctx - sum_ctx
        if spread <= 0:
            return 0.0
        if not mixed:
            return self._pure_rate * spread
        return self.alpha(n, sum_ctx, max_ctx, min_ctx, True) * self.per_ctx * spread

    def as_dict(self) -> dict[str, float]:
        return {"pure": self.pure, "mixed": self.mixed, "mixed_per_inv_n": self.mixed_per_inv_n}


def parse_decode_skew(data: dict, path: Path | str, per_ctx: float) -> DecodeSkew | None:
    """The profile's ``decode_skew`` section (None when it has none); a bad value is one ProfileError naming the
    file and the key."""
    sec = data.get("decode_skew")
    if sec is None:
        return None
    if not isinstance(sec, dict):
        raise ProfileError(f"profile {path}: key 'decode_skew': expected a mapping of {', '.join(KEYS)}")
    vals = []
    for k in KEYS:
        if k not in sec:
            raise ProfileError(f"profile {path}: key 'decode_skew.{k}': missing")
        v = sec[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ProfileError(f"profile {path}: key 'decode_skew.{k}': expected a finite number, got {v!r}")
        vals.append(float(v))
    return DecodeSkew(*vals, per_ctx)
