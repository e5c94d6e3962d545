"""Synthetic generators: every constructor checks its numbers, and no parameter can make a stream hang.

Each bad number is a ConfigError whose message starts with the parameter's name; each termination case
(a tiny rate, a huge one, a too-long duration, an empty stream) ends in well under a second.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from llmsim.errors import ConfigError, TraceError
from llmsim.workload import (
    AzureTrace,
    CsvTrace,
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

NAN, INF = float("nan"), float("inf")
ONE = Independent(Fixed(3), Fixed(2))
HANG_S = 60  # a hang bound (no endless resampling), not a speed target: a pytest-timeout, never a clock assert


def poisson(rate: float = 2.0) -> GammaArrivals:
    return GammaArrivals(rate)


BAD_CONSTRUCTORS: list[tuple[str, Callable[[], object], str]] = [
    # arrivals
    ("rate_zero", lambda: GammaArrivals(0.0), "arrival.rate"),
    ("rate_negative", lambda: GammaArrivals(-1.0), "arrival.rate"),
    ("rate_nan", lambda: GammaArrivals(NAN), "arrival.rate"),
    ("rate_inf", lambda: GammaArrivals(INF), "arrival.rate"),
    ("rate_bool", lambda: GammaArrivals(True), "arrival.rate"),
    ("rate_string", lambda: GammaArrivals("3"), "arrival.rate"),
    ("rate_subnormal", lambda: GammaArrivals(1e-310), "arrival.rate"),
    ("cv_zero", lambda: GammaArrivals(1.0, 0.0), "arrival.cv"),
    ("cv_nan", lambda: GammaArrivals(1.0, NAN), "arrival.cv"),
    ("cv_absurd", lambda: GammaArrivals(1.0, 1e6), "arrival.cv"),
    ("phases_empty", lambda: PhasedArrivals([]), "arrival.phases"),
    ("phase_duration_zero", lambda: PhasedArrivals([Phase(0.0, 1.0)]), r"arrival.phases\[0\].duration"),
    ("phase_duration_inf", lambda: PhasedArrivals([Phase(INF, 1.0)]), r"arrival.phases\[0\].duration"),
    ("phase_rate_negative", lambda: PhasedArrivals([Phase(1.0, 2.0), Phase(1.0, -1.0)]),
     r"arrival.phases\[1\].rate"),
    ("phase_cv_nan", lambda: PhasedArrivals([Phase(1.0, 2.0, NAN)]), r"arrival.phases\[0\].cv"),
    ("phase_not_a_phase", lambda: PhasedArrivals([(1.0, 2.0)]), r"arrival.phases\[0\]"),
    ("repeat_not_bool", lambda: PhasedArrivals([Phase(1.0, 2.0)], repeat="yes"), "arrival.repeat"),
    ("repeat_all_silent", lambda: PhasedArrivals([Phase(1.0, 0.0)], repeat=True), "arrival.phases"),
    ("repeat_nearly_silent", lambda: PhasedArrivals([Phase(1.0, 1e-300)], repeat=True), "arrival.phases"),
    ("duty_one", lambda: square_wave(1.0, 2.0, 10.0, duty=1.0), "arrival.duty"),
    ("duty_zero", lambda: square_wave(1.0, 2.0, 10.0, duty=0.0), "arrival.duty"),
    ("period_negative", lambda: square_wave(1.0, 2.0, -10.0), "arrival.period"),
    ("high_zero", lambda: square_wave(1.0, 0.0, 10.0), "arrival.high"),
    ("low_negative", lambda: square_wave(-1.0, 2.0, 10.0), "arrival.low"),
    ("mixture_sum", lambda: RandomPhases([(0.5, 1, 2), (0.6, 1, 2)], mean_requests=5), "arrival.mixture"),
    ("mixture_probability", lambda: RandomPhases([(1.5, 1, 2), (-0.5, 1, 2)], mean_requests=5),
     r"arrival.mixture\[0\].probability"),
    ("mixture_low_zero", lambda: RandomPhases([(1.0, 0.0, 2)], mean_requests=5), r"arrival.mixture\[0\].low"),
    ("mixture_low_above_high", lambda: RandomPhases([(1.0, 3.0, 2.0)], mean_requests=5), r"arrival.mixture\[0\]"),
    ("mixture_short", lambda: RandomPhases([(1.0, 3.0)], mean_requests=5), r"arrival.mixture\[0\]"),
    ("mixture_empty", lambda: RandomPhases([], mean_requests=5), "arrival.mixture"),
    ("mean_requests_below_one", lambda: RandomPhases([(1.0, 1, 2)], mean_requests=0.5), "arrival.mean_requests"),
    ("mean_seconds_nan", lambda: RandomPhases([(1.0, 1, 2)], mean_seconds=NAN), "arrival.mean_seconds"),
    ("mean_both", lambda: RandomPhases([(1.0, 1, 2)], mean_requests=5, mean_seconds=5), "arrival"),
    # lengths: at least one token, at most 1e8
    ("fixed_zero", lambda: Fixed(0), "fixed.value"),
    ("fixed_fraction", lambda: Fixed(1.5), "fixed.value"),
    ("fixed_absurd", lambda: Fixed(10**30), "fixed.value"),
    ("uniform_min_zero", lambda: Uniform(0, 5), "uniform.min"),
    ("uniform_max_below_min", lambda: Uniform(5, 3), "uniform.max"),
    ("lognormal_mu_nan", lambda: LogNormal(NAN, 1.0), "lognormal.mu"),
    ("lognormal_sigma_negative", lambda: LogNormal(1.0, -1.0), "lognormal.sigma"),
    ("lognormal_min_zero", lambda: LogNormal(1.0, 1.0, min=0), "lognormal.min"),
    ("lognormal_mean_zero", lambda: LogNormal.from_mean_sigma(0.0, 1.0), "lognormal.mean"),
    ("lognormal_p50_above_mean", lambda: LogNormal.from_mean_median(100.0, 200.0), "lognormal"),
    ("empirical_min_zero", lambda: Empirical([(3, 4)], prompt_min=0), "lengths.prompt.min"),
    ("pair_not_a_model", lambda: Independent(Fixed(1), 5), "lengths.output"),
    # synthetic workload
    ("num_requests_zero", lambda: SyntheticWorkload(poisson(), ONE, num_requests=0), "num_requests"),
    ("num_requests_fraction", lambda: SyntheticWorkload(poisson(), ONE, num_requests=1.5), "num_requests"),
    ("num_requests_bool", lambda: SyntheticWorkload(poisson(), ONE, num_requests=True), "num_requests"),
    ("duration_nan", lambda: SyntheticWorkload(poisson(), ONE, duration=NAN), "duration"),
    ("duration_zero", lambda: SyntheticWorkload(poisson(), ONE, duration=0.0), "duration"),
    ("seed_negative", lambda: SyntheticWorkload(poisson(), ONE, num_requests=3, seed=-1), "seed"),
    ("mix_nan", lambda: SyntheticWorkload(poisson(), ONE, num_requests=3, task_mix={"a": NAN}), "task_mix.a"),
    ("mix_zero_sum", lambda: SyntheticWorkload(poisson(), ONE, num_requests=3, tenant_mix={"a": 0}), "tenant_mix"),
    ("mix_empty", lambda: SyntheticWorkload(poisson(), ONE, num_requests=3, slo_class_mix={}), "slo_class_mix"),
    ("endless", lambda: SyntheticWorkload(poisson(), ONE), "synthetic workload"),
    ("arrival_not_a_process", lambda: SyntheticWorkload(2.0, ONE, num_requests=3), "arrival"),
    # transforms
    ("window_start_negative", lambda: Windowed(SyntheticWorkload(poisson(), ONE, num_requests=3), -1.0), "window"),
    ("window_end_before_start", lambda: Windowed(SyntheticWorkload(poisson(), ONE, num_requests=3), 5.0, 5.0),
     "window.end"),
    ("rate_scale_nan", lambda: RateScaled(SyntheticWorkload(poisson(), ONE, num_requests=3), NAN), "rate_scale"),
    ("rate_scale_subnormal", lambda: RateScaled(SyntheticWorkload(poisson(), ONE, num_requests=3), 1e-310),
     "rate_scale"),
    ("limit_zero", lambda: Limited(SyntheticWorkload(poisson(), ONE, num_requests=3), 0), "max_requests"),
]


@pytest.mark.parametrize(("make", "param"), [c[1:] for c in BAD_CONSTRUCTORS], ids=[c[0] for c in BAD_CONSTRUCTORS])
def test_constructor_rejects_bad_number_naming_the_parameter(make: Callable[[], object], param: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{param}(?=[:.\[ ])") as exc:
        make()
    assert "\n" not in str(exc.value) and "expected" in str(exc.value)


@pytest.mark.timeout(HANG_S, method="thread")
def test_tiny_rate_gives_far_but_finite_arrivals() -> None:
    reqs = list(SyntheticWorkload(GammaArrivals(1e-300), ONE, num_requests=5))
    times = [r.arrival for r in reqs]
    assert len(times) == 5 and all(math.isfinite(t) and t > 1e290 for t in times) and times == sorted(times)
    # 1e-306: the first arrivals are finite (~1e306 s), the stream overflows after a few hundred
    assert len(list(SyntheticWorkload(GammaArrivals(1e-306), ONE, num_requests=3))) == 3
    with pytest.raises(ConfigError, match=r"^arrival.rate: arrival times overflow to inf"):
        list(SyntheticWorkload(GammaArrivals(1e-306), ONE, num_requests=10_000))


@pytest.mark.timeout(HANG_S, method="thread")
def test_gaps_below_float_resolution_raise_instead_of_looping() -> None:
    proc = PhasedArrivals([Phase(1e17, 0.0), Phase(10.0, 1000.0)])  # phase 2 starts where ulp(t) = 16 s
    with pytest.raises(ConfigError, match=r"stopped advancing at t = 1e\+17 s"):
        proc.first(np.random.default_rng(0), 10)


def test_duration_only_stream_must_be_a_sane_size() -> None:
    with pytest.raises(ConfigError, match=r"^duration: .* expects up to 1e\+10 requests"):
        SyntheticWorkload(GammaArrivals(1000.0), ONE, duration=1e7)
    with pytest.raises(ConfigError, match=r"^duration: "):
        SyntheticWorkload(square_wave(1.0, 1e6, 10.0), ONE, duration=1e5)
    assert SyntheticWorkload(GammaArrivals(1000.0), ONE, duration=1e7, num_requests=5).num_requests == 5


@pytest.mark.timeout(HANG_S, method="thread")
def test_a_stream_with_no_request_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"^synthetic workload: expected at least one request, got none"):
        list(SyntheticWorkload(GammaArrivals(1e-3), ONE, duration=1.0))
    with pytest.raises(ConfigError, match=r"^synthetic workload: .*no arrival"):
        list(SyntheticWorkload(PhasedArrivals([Phase(5.0, 0.0)]), ONE))


def test_empty_window_is_an_error_but_a_partly_read_one_is_not() -> None:
    wl = Windowed(SyntheticWorkload(GammaArrivals(10.0), ONE, num_requests=20), 1000.0, 2000.0)
    with pytest.raises(ConfigError, match=r"^window: expected at least one request in \[1000, 2000\) s .*20 requests"):
        list(wl)
    wl = Windowed(SyntheticWorkload(GammaArrivals(10.0), ONE, num_requests=1000), 1.0, 2.0)
    first = next(iter(wl))  # stopping early is not a complete pass: no error
    assert first.id == 0


def test_rate_scale_overflow_is_named() -> None:
    wl = RateScaled(SyntheticWorkload(GammaArrivals(1e-290), ONE, num_requests=3), 1e-30)
    with pytest.raises(ConfigError, match=r"^rate_scale: .* at inf"):
        list(wl)


def test_rate_scale_past_the_horizon_is_named(tmp_path: Path) -> None:
    """A factor that pushes a trace's arrivals past the simulated horizon names rate_scale (the cluster then said
    'request N ... a tiny workload.rate?', and a trace's own times are checked by its reader)."""
    path = tmp_path / "t.csv"
    path.write_text("t,p,o\n0,5,5\n10,5,5\n2000,5,5\n")
    wl = RateScaled(CsvTrace(path, "t", "p", "o"), 1e-9)
    with pytest.raises(ConfigError, match=r"^rate_scale: 1e-09 puts request 2's arrival at 2e\+12 s, past the "
                                          r"simulated horizon of 1e\+12 s; expected a larger factor "
                                          r"\(at least 2e-09 for this request\)$"):
        list(wl)
    assert [r.arrival for r in RateScaled(CsvTrace(path, "t", "p", "o"), 2e-9)][-1] == pytest.approx(1e12)


def test_length_samples_never_zero_nor_past_the_bound() -> None:
    rng = np.random.default_rng(0)
    x = LogNormal(0.0, 9.0).sample(rng, 100_000)  # exp(+-9 sigma) under- and overflows the clip range
    assert x.min() == 1 and x.max() == 10**8 and x.dtype == np.int64
    assert Uniform(1, 1).sample(rng, 5).tolist() == [1] * 5


def test_empirical_file_errors_name_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n5,7\n3,nan\n")
    with pytest.raises(TraceError, match=r"lengths\.csv: line 3, column 'num_decode_tokens': expected an integer"):
        Empirical(path)
    path.write_bytes(b"num_prefill_tokens,num_decode_tokens\n5,7\n4,0\n0,3\n")
    emp = Empirical(path)
    assert len(emp) == 1 and emp.skipped == {"zero_prompt_tokens": 1, "zero_output_tokens": 1}
    jsonl = tmp_path / "l.jsonl"
    jsonl.write_text('{"input_length": 3, "output_length": 4}\n{"input_length": 3, "output_length": 4\n')
    with pytest.raises(TraceError, match=r"l\.jsonl: line 2: expected a JSON object"):
        Empirical(jsonl)
    jsonl.write_text('{"input_length": 3, "output_length": 4}\n{"input_length": 3, "output_length": 4, '
                     '"output_length": 40}\n')
    with pytest.raises(TraceError, match=r"l\.jsonl: line 2, column 'output_length': expected each key once"):
        Empirical(jsonl)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(TraceError, match=r"empty\.csv: line 1: expected a header row, got an empty file"):
        Empirical(tmp_path / "empty.csv")


def test_azure_rows_with_absurd_values_are_skippable(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1e30,3\n2023-11-16 18:15:47,5,3\n")
    wl = AzureTrace(path, on_error="skip")
    assert [(r.id, r.arrival, r.prompt_tokens) for r in wl] == [(0, 0.0, 5)]  # the clock starts at the first valid row
    assert wl.stats.skipped == {"malformed": 1}


# -- the one MMPP generator --------------------------------------------------------------------------


def test_mmpp_sample_is_the_stream_prefix_and_draws_nothing_past_it() -> None:
    proc = RandomPhases([(0.7, 1.0, 3.0), (0.3, 20.0, 40.0)], mean_requests=50)
    rng_a, rng_b = np.random.default_rng(4), np.random.default_rng(4)
    times, rates = proc.sample(rng_a, 1000)
    stream = np.concatenate(list(_take(proc.batches(rng_b), 1000)))[:1000]
    assert np.array_equal(times, stream) and times.size == 1000 and np.all(np.diff(times) >= 0)
    assert (((rates >= 1.0) & (rates <= 3.0)) | ((rates >= 20.0) & (rates <= 40.0))).all()
    assert 1 < np.unique(rates).size < 1000 / 10  # phases of ~50 requests share one rate
    rng_c = np.random.default_rng(4)
    proc.sample(rng_c, 1000)
    assert rng_c.random() == rng_a.random()  # same state after: callers sharing the generator are reproducible


def _take(batches, n):
    got = 0
    for b in batches:
        yield b
        got += b.size
        if got >= n:
            return


@pytest.mark.parametrize("value", ["yes", "no", "true", 1, 0, None])
@pytest.mark.parametrize(("cfg", "key"), [
    ({"kind": "burstgpt_like", "num_requests": 5}, "diurnal"),
    ({"kind": "burstgpt", "path": "x.csv"}, "sessions"),
    ({"kind": "synthetic", "num_requests": 5, "arrival": {"process": "phases", "phases": [[1, 1]]}}, "arrival.repeat"),
])
def test_a_boolean_key_takes_only_true_or_false(cfg: dict, key: str, value: object) -> None:
    """A boolean option is true or false: lax parsing read 'yes' and 1 as true and 'no' and 0 as false, silently."""
    cfg = {**cfg, "arrival": {**cfg["arrival"], "repeat": value}} if key == "arrival.repeat" else {**cfg, key: value}
    with pytest.raises(ConfigError, match=rf"^workload\.{key}: expected true or false, got {value!r}"):
        build_workload(cfg, seed=0)
