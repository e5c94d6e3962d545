"""Sliding-window attention in the roofline: a layer reads at most ``window`` keys per query."""

from __future__ import annotations

import dataclasses

import pytest

from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import from_hf_config, get_model
from llmsim.perf.profile import RooflineProfile
from tests.perf.helpers import tiny


def profiles(window: int) -> tuple[RooflineProfile, RooflineProfile]:
    windowed = from_hf_config(tiny("tiny-mistral-window"))
    assert windowed.sliding_window == 256
    windowed = dataclasses.replace(windowed, sliding_window=window)
    full = dataclasses.replace(windowed, sliding_window=0)
    g = get_gpu("a10")
    return RooflineProfile(windowed, g), RooflineProfile(full, g)


def test_decode_reads_at_most_the_window_per_sequence():
    win, full = profiles(256)
    # 4 sequences of 100 keys each: inside the window, nothing changes
    assert win.step_time(4, 4, 0, 0, 4, 400) == full.step_time(4, 4, 0, 0, 4, 400)
    # 4 sequences of 5,000 keys: each reads 256, as a full-attention batch of 4 x 256 would
    assert win.step_time(4, 4, 0, 0, 4, 20_000) == pytest.approx(full.step_time(4, 4, 0, 0, 4, 4 * 256))
    assert win.step_time(4, 4, 0, 0, 4, 20_000) < full.step_time(4, 4, 0, 0, 4, 20_000)


def test_a_prefill_chunk_attends_to_at_most_the_window_of_its_cache():
    win, full = profiles(256)
    chunk, cached = 64, 10_000  # one chunk of 64 tokens after 10,000 cached ones
    assert win.step_time(chunk, 1, chunk ** 2, chunk * cached, 0, 0) == pytest.approx(
        full.step_time(chunk, 1, chunk ** 2, chunk * 256, 0, 0))
    short = (chunk, 1, chunk ** 2, chunk * 100, 0, 0)  # 100 cached keys: inside the window
    assert win.step_time(*short) == full.step_time(*short)


def test_registered_mistral_carries_its_window():
    assert get_model("mistral-7b").sliding_window == 4096  # Mistral-7B-v0.1's config.json
    assert get_model("llama-3.1-8b").sliding_window == 0


def test_a_window_on_only_some_layers_is_priced_as_full_attention():
    """Gemma-2 alternates windowed and full-attention layers: capping every layer at the window would price its
    full layers below the truth, so the roofline prices them all as full attention (an upper bound, as its KV
    accounting), not at the window."""
    win, full = profiles(256)
    some = RooflineProfile(dataclasses.replace(win.model, window_every_layer=False), win.gpu)
    decode = (4, 4, 0, 0, 4, 20_000)
    prefill = (64, 1, 64 ** 2, 64 * 10_000, 0, 0)
    assert some.step_time(*decode) == full.step_time(*decode) > win.step_time(*decode)
    assert some.step_time(*prefill) == full.step_time(*prefill) > win.step_time(*prefill)
