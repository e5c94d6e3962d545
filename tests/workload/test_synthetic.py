"""Synthetic arrivals and lengths, determinism, transforms, laziness and the config factory."""

from __future__ import annotations

import inspect
import itertools
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from llmsim.errors import ConfigError
from llmsim.workload import (
    LENGTH_PRESETS,
    Empirical,
    Fixed,
    GammaArrivals,
    Independent,
    Limited,
    LogNormal,
    Phase,
    PhasedArrivals,
    RandomPhases,
    RateScaled,
    SyntheticWorkload,
    Uniform,
    Windowed,
    build_workload,
    square_wave,
)

FIXED = Independent(Fixed(10), Fixed(5))


def arrivals(wl) -> np.ndarray:
    return np.array([r.arrival for r in wl])


def poisson_cfg(**over) -> dict:
    cfg = {
        "kind": "synthetic",
        "arrival": {"process": "poisson", "rate": 4.0},
        "prompt": {"dist": "lognormal", "mean": 1155, "sigma": 1.0, "min": 1, "max": 4096},
        "output": {"dist": "uniform", "min": 1, "max": 100},
        "num_requests": 1000,
    }
    cfg.update(over)
    return cfg


def conv_cfg(**over) -> dict:
    cfg = {k: v for k, v in poisson_cfg().items() if k not in ("prompt", "output")}
    cfg["lengths"] = "azure_conv_like"
    cfg.update(over)
    return cfg


# -- arrivals ----------------------------------------------------------------------------------


def test_poisson_mean_rate() -> None:
    t = arrivals(SyntheticWorkload(GammaArrivals(4.0), FIXED, seed=1, num_requests=20_000))
    assert np.all(np.diff(t) >= 0)
    assert 20_000 / t[-1] == pytest.approx(4.0, rel=0.03)
    gaps = np.diff(np.concatenate(([0.0], t)))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_cv(cv: float) -> None:
    t = arrivals(SyntheticWorkload(GammaArrivals(10.0, cv), FIXED, seed=2, num_requests=20_000))
    gaps = np.diff(np.concatenate(([0.0], t)))
    assert gaps.mean() == pytest.approx(0.1, rel=0.06)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_phases_counts_per_phase() -> None:
    phases = [Phase(100.0, 2.0), Phase(50.0, 0.0), Phase(100.0, 20.0, 2.0)]
    t = arrivals(SyntheticWorkload(PhasedArrivals(phases), FIXED, seed=3))  # finite: no limit needed
    counts = [np.sum(t < 100), np.sum((t >= 100) & (t < 150)), np.sum(t >= 150)]
    assert counts[0] == pytest.approx(200, abs=4 * np.sqrt(200))
    assert counts[1] == 0
    assert counts[2] == pytest.approx(2000, rel=0.15)
    assert t[-1] < 250


def test_square_wave_alternates() -> None:
    wl = SyntheticWorkload(
        square_wave(low=1.0, high=30.0, period=20.0, duty=0.25), FIXED, seed=4, duration=2000.0
    )
    t = arrivals(wl)
    phase = np.mod(t, 20.0)
    high, low = np.sum(phase < 5.0), np.sum(phase >= 5.0)
    assert high / (100 * 5.0) == pytest.approx(30.0, rel=0.05)
    assert low / (100 * 15.0) == pytest.approx(1.0, rel=0.1)
    assert t[-1] < 2000.0 and wl.stats.stopped == "duration"


@pytest.mark.parametrize("phases,rate,rel", [
    ([Phase(2.0, 5.0, 4.0)], 5.0, 0.025),  # a stationary schedule, like gamma rate 5 cv 4: it gave 8.4 req/s
    ([Phase(10.0, 5.0, 3.0)], 5.0, 0.025),  # 5.4 req/s
    ([Phase(10.0, 5.0, 0.2)], 5.0, 0.003),  # 4.95 req/s (a regular process started at a full gap loses arrivals)
    ([Phase(15.0, 20.0, 4.0), Phase(45.0, 1.0, 4.0)], 5.75, 0.025),  # square_wave(1, 20, 60, 0.25, cv=4): 6.0
])
def test_phases_with_cv_keep_the_configured_rate(phases: list[Phase], rate: float, rel: float) -> None:
    """Each phase is a stationary renewal process (its first arrival a forward-recurrence time), so a phase of d
    seconds expects rate * d arrivals whatever its cv; an ordinary renewal process restarted at every phase start
    added (cv^2 - 1) / 2 arrivals per phase. ``rel`` is about 4 sd of the count (var ~ cv^2 n) and well below
    that bias."""
    proc = PhasedArrivals(phases, repeat=True)
    period = sum(p.duration for p in phases)
    t = proc.first(np.random.default_rng(11), 400_000)
    whole = np.floor(t[-1] / period) * period  # whole cycles only: the rate varies within one
    assert np.sum(t < whole) / whole == pytest.approx(rate, rel=rel)


def test_square_wave_with_cv_keeps_its_mean_rate() -> None:
    t = square_wave(low=1.0, high=20.0, period=60.0, duty=0.25, cv=4.0).first(np.random.default_rng(12), 400_000)
    whole = np.floor(t[-1] / 60.0) * 60.0
    assert np.sum(t < whole) / whole == pytest.approx(5.75, rel=0.025)


def test_poisson_phases_draw_as_before() -> None:
    """cv = 1 phases are unchanged draw for draw (an exponential first gap is already stationary)."""
    rng = np.random.default_rng(13)
    t = PhasedArrivals([Phase(5.0, 3.0)]).first(np.random.default_rng(13), 10)
    assert t.tolist() == (np.cumsum(rng.exponential(1 / 3.0, size=23))[:10]).tolist()


def test_mmpp_preset_rates_and_phase_lengths() -> None:
    wl = build_workload(
        {
            "kind": "synthetic",
            "arrival": {"preset": "best_effort_unpredictable_2"},
            "lengths": "azure_conv_like",
            "num_requests": 10_000,
        },
        seed=5,
    )
    t = arrivals(wl)
    rate = len(t) / t[-1]
    assert 1.0 < rate < 48.0
    proc = RandomPhases([(1.0, 5.0, 5.0)], mean_requests=50)
    sizes = [b.size for b in itertools.islice(proc.batches(np.random.default_rng(0)), 2000)]
    assert np.mean(sizes) == pytest.approx(50, rel=0.1)


def test_duration_and_limit_stop() -> None:
    wl = SyntheticWorkload(GammaArrivals(50.0), FIXED, seed=0, duration=10.0)
    t = arrivals(wl)
    assert t.max() < 10.0 and len(t) == pytest.approx(500, abs=100)
    with pytest.raises(ConfigError, match="num_requests"):
        SyntheticWorkload(GammaArrivals(1.0), FIXED)


# -- lengths -----------------------------------------------------------------------------------


def test_lognormal_mean_and_median_parameterisations() -> None:
    rng = np.random.default_rng(0)
    x = LogNormal.from_mean_sigma(500.0, 0.8).sample(rng, 200_000)
    assert x.mean() == pytest.approx(500, rel=0.02)
    y = LogNormal.from_mean_median(211.0, 129.0).sample(rng, 200_000)
    assert y.mean() == pytest.approx(211, rel=0.03)
    assert np.median(y) == pytest.approx(129, rel=0.03)


def test_clipping() -> None:
    rng = np.random.default_rng(0)
    x = LogNormal.from_mean_sigma(1000.0, 2.0, min=16, max=2048).sample(rng, 50_000)
    assert x.min() == 16 and x.max() == 2048
    u = Uniform(3, 7).sample(rng, 10_000)
    assert set(u.tolist()) == {3, 4, 5, 6, 7}


def test_empirical_samples_pairs_jointly(tmp_path: Path) -> None:
    table = {"num_prefill_tokens": [10, 20, 30, 40], "num_decode_tokens": [1, 2, 3, 0]}
    emp = Empirical(table, output_max=2)
    assert len(emp) == 3 and emp.dropped_rows == 1  # zero outputs (failures) are dropped
    p, o = emp.sample(np.random.default_rng(0), 3000)
    assert set(zip(p.tolist(), o.tolist())) == {(10, 1), (20, 2), (30, 2)}  # (30, 3) clipped to 2
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n5,7,12,0.7\n")
    p, o = Empirical(path).sample(np.random.default_rng(0), 4)
    assert p.tolist() == [5] * 4 and o.tolist() == [7] * 4
    p, o = Empirical([(3, 4), (5, 6)], prompt_max=4).sample(np.random.default_rng(0), 100)
    assert set(zip(p.tolist(), o.tolist())) == {(3, 4), (4, 6)}


def test_azure_conv_like_preset_matches_trace_means() -> None:
    pm = LENGTH_PRESETS["azure_conv_like"]
    p, o = pm.sample(np.random.default_rng(0), 400_000)
    assert p.mean() == pytest.approx(1155, rel=0.01)
    assert o.mean() == pytest.approx(211, rel=0.02)
    assert np.median(p) == pytest.approx(1020, rel=0.02) and np.median(o) == pytest.approx(129, rel=0.03)


def test_empirical_from_real_sharegpt(shared_dir: Path) -> None:
    path = shared_dir / "traces" / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    if not path.exists():
        pytest.skip(f"real length table {path} is not present in ../shared")
    wl = build_workload(
        {
            "kind": "synthetic",
            "arrival": {"process": "poisson", "rate": 2.0},
            "num_requests": 20_000,
            "lengths": {"dist": "empirical", "path": str(path)},
        },
        seed=0,
    )
    reqs = list(wl)
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(2340.0, rel=0.03)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(438.7, rel=0.03)


# -- determinism, transforms, laziness -----------------------------------------------------------


def key(wl) -> list[tuple]:
    return [(r.id, r.arrival, r.prompt_tokens, r.output_tokens, r.task) for r in wl]


def test_determinism() -> None:
    cfg = poisson_cfg(task_mix={"HellaSwag": 1, "COPA": 1})
    a = build_workload(cfg, seed=7)
    assert key(a) == key(a)  # re-iterating gives the same stream
    assert key(a) == key(build_workload(cfg, seed=7))
    assert key(a) != key(build_workload(cfg, seed=8))
    assert [r.id for r in a] == list(range(1000))
    assert {r.task for r in a} == {"HellaSwag", "COPA"}


def test_length_model_change_keeps_arrivals() -> None:
    a = arrivals(build_workload(poisson_cfg(), seed=3))
    b = arrivals(build_workload(conv_cfg(), seed=3))
    assert np.array_equal(a, b)


def test_rate_scale_window_limit() -> None:
    base = SyntheticWorkload(GammaArrivals(5.0), FIXED, seed=9, num_requests=5000)
    t = arrivals(base)
    scaled = arrivals(RateScaled(base, 2.0))
    assert np.allclose(scaled, t / 2.0)
    win = Windowed(base, 100.0, 200.0)
    reqs = list(win)
    expected = t[(t >= 100.0) & (t < 200.0)] - 100.0
    assert np.allclose([r.arrival for r in reqs], expected)
    assert [r.id for r in reqs] == list(range(len(reqs)))
    assert win.stats.skipped["outside_window"] == np.sum(t < 100.0) + 1
    assert win.stats.stopped == "window_end"
    lim = Limited(base, 7)
    assert [r.id for r in lim] == list(range(7)) and lim.stats.yielded == 7
    # factory order: window in source time, then scale, then limit
    wl = build_workload(poisson_cfg(num_requests=5000, window=[100, 200], rate_scale=2.0, max_requests=50), 0)
    reqs = list(wl)
    assert len(reqs) == 50 and all(0 <= r.arrival < 50 for r in reqs)
    assert wl.describe()["kind"] == "limit" and wl.describe()["source"]["kind"] == "rate_scale"


def test_laziness_first_ten_of_ten_million() -> None:
    wl = build_workload(poisson_cfg(num_requests=10**7), seed=0)
    it = iter(wl)
    assert inspect.isgenerator(it)
    tracemalloc.start()
    try:
        first = list(itertools.islice(it, 10))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.id for r in first] == list(range(10))
    assert peak < 20 * 2**20  # one 4096-request batch, not 10^7 arrivals (80 MB of floats alone)
    assert wl.stats.yielded == 10 and wl.stats.rows_read <= 4096


def test_stats_and_describe() -> None:
    wl = build_workload(poisson_cfg(), seed=1)
    assert len(list(wl)) == 1000
    assert wl.stats.as_dict()["yielded"] == 1000 and wl.stats.stopped == "num_requests"
    d = wl.describe()
    assert d["kind"] == "synthetic" and d["arrival"] == {"process": "poisson", "rate": 4.0}


# -- config errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "pattern"),
    [
        ({"kind": "synthetic", "arival": {}}, r"unknown key 'arival'.*allowed keys"),
        ({"kind": "nope"}, r"kind: unknown value 'nope'"),
        (poisson_cfg(arrival={"process": "poisson", "rte": 1}), r"workload.arrival: unknown key 'rte'"),
        (poisson_cfg(prompt={"dist": "lognormal", "mean": 5, "sigma": 1, "p50": 3}), r"exactly one of"),
        (poisson_cfg(arrival={"process": "poisson", "rate": -1}), r"arrival.rate: expected a value > 0"),
        (poisson_cfg(output={"dist": "fixed", "value": 1, "max": 3}), r"unknown key 'max'"),
        ({"kind": "azure", "path": "x", "model": "GPT-4"}, r"workload: unknown key 'model'"),
        (poisson_cfg(window=[5, 1]), r"window: expected a window end > its start \(a window \[start_s, end_s\]\), "
                                     r"got \[5, 1\]$"),
        (poisson_cfg(window=[0, math.nan]), r"window: expected a finite window end >= 0, got \[0, nan\]$"),
        (poisson_cfg(window="0-5"), r"window: expected a window \[start_s, end_s\] or \{start, end\}, got '0-5'$"),
        (poisson_cfg(window=["a", 5]), r"window: expected a number of seconds as the window start, got \['a', 5\]$"),
        (conv_cfg(lengths={"preset": "nope"}), r"preset: unknown value 'nope'"),
    ],
)
def test_config_errors(cfg: dict, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        build_workload(cfg, seed=0)


def test_top_level_rate_overrides_arrival_rate() -> None:
    t = arrivals(build_workload(poisson_cfg(rate=40.0, num_requests=20_000), seed=0))
    assert len(t) / t[-1] == pytest.approx(40.0, rel=0.03)


def test_million_request_stream_is_batched() -> None:
    # not a timing test: a million-request stream is consumed without materialising a list
    wl = build_workload(conv_cfg(num_requests=1_000_000), seed=0)
    n = total = 0
    for r in wl:
        n += 1
        total += r.prompt_tokens
    assert n == 1_000_000 and total / n == pytest.approx(1155, rel=0.01)
