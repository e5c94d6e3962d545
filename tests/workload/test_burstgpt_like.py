"""``kind: burstgpt_like``: sample statistics match the parameters (rates, per-period CV, Zipf exponent, bimodal
responses, mix fractions), the defaults reproduce the measured numbers they were fitted to (docs/workloads.md),
and the stream is deterministic per seed."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from llmsim.errors import ConfigError
from llmsim.workload import build_workload
from llmsim.workload.burstgpt_like import CONV_PROFILE, DEFAULT_STREAMS, BurstGPTLike, DayProfile, _Stream


def rows(wl) -> list[tuple]:
    return [(r.id, r.arrival, r.prompt_tokens, r.output_tokens, r.extra["model"], r.extra["log_type"]) for r in wl]


def zipf_mle(k: np.ndarray, lo: int, hi: int) -> float:
    """Maximum-likelihood exponent of a Zipf law truncated to [lo, hi]."""
    support = np.arange(lo, hi + 1, dtype=float)
    log_support = np.log(support)
    mean_log = float(np.log(k).mean())

    def nll(theta: float) -> float:
        return theta * mean_log + math.log(np.exp(-theta * log_support).sum())

    return float(minimize_scalar(nll, bounds=(0.05, 8.0), method="bounded").x)


def test_deterministic_per_seed_and_reiterable() -> None:
    cfg = {"kind": "burstgpt_like", "rate": 5.0, "model": {"ChatGPT": 3, "GPT-4": 1},
           "mix": {"conversation": 1, "api": 1}, "num_requests": 3000, "start_hour": 9.5}
    a = build_workload(cfg, seed=7)
    first = rows(a)
    assert first == rows(a) == rows(build_workload(cfg, seed=7))
    assert first != rows(build_workload(cfg, seed=8))
    assert len(first) == 3000 and [r[0] for r in first] == list(range(3000))
    assert all(x[1] <= y[1] for x, y in zip(first, first[1:]))
    assert a.stats.rows_read == a.stats.yielded == 3000 and a.stats.stopped == "num_requests"


def test_a_stream_does_not_depend_on_the_others() -> None:
    """Each (service, model) stream has its own child seed: mixing in another leaves it unchanged."""
    alone = BurstGPTLike(rate=1.0, mix={"api": 1}, seed=3, duration=3000)
    both = BurstGPTLike(rate=2.0, mix={"api": 1, "conversation": 1}, seed=3, duration=3000)
    api = [r[1:4] for r in rows(both) if r[5] == "API log"]
    assert api == [r[1:4] for r in rows(alone)] and len(api) > 500


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_mean_rate_and_inter_arrival_cv(cv: float) -> None:
    wl = BurstGPTLike(rate=2.0, mix={"api": 1}, diurnal=False, num_requests=6000, period_s=600, seed=1,
                      overrides={"api": {"cv": cv, "rate_noise": 0.0}})
    t = np.array([r.arrival for r in wl])
    period = np.floor(t / 600)
    gaps = np.diff(t)[np.diff(period) == 0]  # gaps inside a period (each period restarts its renewal process)
    assert len(t) / t[-1] == pytest.approx(2.0, rel=0.06)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


@pytest.mark.parametrize(("service", "cv", "noise"),
                         [("api", 1.5, 0.0), ("conversation", 0.92, 0.0), ("api", 4.0, 0.0), ("api", 1.5, 0.8)])
def test_no_burst_or_lull_where_a_period_starts(service: str, cv: float, noise: float) -> None:
    """The gap straddling a period's end carries over (rescaled to the new rate): the rate just after a period
    boundary is the period's rate, not a burst (CV > 1) or a lull (CV < 1), whether or not the rate changes
    there. Restarting each period with a full gap gave +23 % in the first 10 s of every period at CV 1.5."""
    wl = BurstGPTLike(rate=0.5, mix=service, diurnal=False, period_s=100.0, duration=4e5, seed=1,
                      overrides={service: {"rate_noise": noise, "cv": cv}})
    t = np.array([r.arrival for r in wl])
    counts, _ = np.histogram(t % 100.0, bins=10, range=(0.0, 100.0))
    assert counts[0] / counts[1:].mean() == pytest.approx(1.0, abs=0.05)
    assert t.size / (0.5 * 4e5) == pytest.approx(1.0, abs=0.02 if noise == 0 else 0.06)  # noise: sd ~0.015


def test_rate_noise_is_mean_one_and_spreads_period_counts() -> None:
    """The API's per-period lognormal rate factor keeps the mean rate and widens the spread of period counts."""
    counts = {}
    for noise in (0.0, 0.5):
        wl = BurstGPTLike(rate=1.0, mix={"api": 1}, diurnal=False, duration=60 * 500.0, period_s=60, seed=11,
                          overrides={"api": {"rate_noise": noise}})
        t = np.array([r.arrival for r in wl])
        counts[noise] = np.bincount((t // 60).astype(int), minlength=500)
        assert len(t) / (60 * 500) == pytest.approx(1.0, rel=0.08)
    assert counts[0.5].std() > 2 * counts[0.0].std()


def test_each_period_has_its_own_cv_and_rate() -> None:
    """An hour-of-day CV schedule and rate profile: the per-period sample CVs and counts follow them."""
    cvs, profile = [0.6, 2.5], [1.0, 3.0]  # slot centres at 06:00 and 18:00, linear in between
    wl = BurstGPTLike(rate=0.5, mix={"conversation": 1}, duration=86400.0, period_s=3600, seed=4,
                      overrides={"conversation": {"cv": cvs, "profile": profile, "rate_noise": 0.0}})
    t = np.array([r.arrival for r in wl])
    hour = np.floor(t / 3600).astype(int)
    cv_day, rate_day = DayProfile(cvs, "cv", normalise=False), DayProfile(profile, "profile", normalise=True)
    want_cv = np.array([cv_day.at(h * 3600 + 1800) for h in range(24)])
    got_cv = np.array([np.diff(t[hour == h]).std() / np.diff(t[hour == h]).mean() for h in range(24)])
    assert np.corrcoef(want_cv, got_cv)[0, 1] > 0.9
    low, high = want_cv < 1.0, want_cv > 2.0
    assert got_cv[low].mean() == pytest.approx(want_cv[low].mean(), rel=0.1)
    assert got_cv[high].mean() == pytest.approx(want_cv[high].mean(), rel=0.15)
    want_n = np.array([0.5 * 3600 * rate_day.mean(h * 3600, (h + 1) * 3600) for h in range(24)])
    got_n = np.bincount(hour, minlength=24)
    assert len(t) == pytest.approx(0.5 * 86400, rel=0.05)  # the day's mean rate is `rate`
    assert np.corrcoef(want_n, got_n)[0, 1] > 0.95


def test_default_conversation_profile_over_a_day() -> None:
    """Hour-of-day counts follow the README figure's shape (deep night trough, afternoon peak)."""
    wl = BurstGPTLike(rate=0.1, mix={"conversation": 1}, duration=86400.0, seed=5)
    hour = np.floor(np.array([r.arrival for r in wl]) / 3600).astype(int)
    counts = np.bincount(hour, minlength=24)
    day = DayProfile(CONV_PROFILE, "p", normalise=True)
    want = np.array([0.1 * 3600 * day.mean(h * 3600, (h + 1) * 3600) for h in range(24)])
    assert counts.sum() == pytest.approx(0.1 * 86400, rel=0.05)
    assert np.corrcoef(want, counts)[0, 1] > 0.95
    assert counts[14:17].sum() > 10 * counts[2:5].sum()
    late = BurstGPTLike(rate=0.1, mix={"conversation": 1}, duration=3600.0, start_hour=15.0, seed=5)
    assert len(list(late)) == pytest.approx(want[15], rel=0.2)


@pytest.mark.parametrize("service,theta", [("api", 2.674), ("conversation", 1.682), ("paper", 1.1)])
def test_request_lengths_are_zipf_with_the_configured_exponent(service: str, theta: float) -> None:
    over = {"request": {"theta": 1.1, "min": 1, "max": 1023}} if service == "paper" else {}
    svc = "api" if service == "paper" else service
    wl = BurstGPTLike(rate=5.0, mix={svc: 1}, num_requests=4000, seed=6, overrides={svc: over})
    k = np.array([r.prompt_tokens for r in wl])
    lo, hi = (1, 1023) if service == "paper" else DEFAULT_STREAMS[(svc, "ChatGPT")].request[1:]
    assert k.min() >= lo and k.max() <= hi
    assert zipf_mle(k, lo, hi) == pytest.approx(theta, abs=0.08)
    if service == "paper":  # the BurstGPT-Perf generator: np.random.zipf(1.1) kept below 1024 (mean 101.7)
        assert k.mean() == pytest.approx(101.7, rel=0.1)


def test_chatgpt_api_responses_are_bimodal() -> None:
    wl = BurstGPTLike(rate=5.0, mix={"api": 1}, num_requests=5000, seed=2)
    out = np.array([r.output_tokens for r in wl])
    hist, _ = np.histogram(np.log(out), bins=np.linspace(0, 8, 17))  # 0.5-wide bins of ln(tokens)
    short, long_ = hist[4:8].max(), hist[10:14].max()  # around ln 12.6 = 2.5 and ln 492 = 6.2
    dip = hist[8:11].min()  # ln 55 - ln 245
    assert dip < 0.25 * long_ and long_ < 0.5 * short
    assert (out < 100).mean() == pytest.approx(0.903, abs=0.02)  # the short mode's weight


def test_conversation_vs_api_and_model_mix_fractions() -> None:
    wl = BurstGPTLike(rate=5.0, mix={"conversation": 0.3, "api": 0.7}, model={"ChatGPT": 3, "GPT-4": 1},
                      diurnal=False, num_requests=6000, seed=9, overrides={"api": {"rate_noise": 0.0}})
    c = Counter((r.extra["log_type"], r.extra["model"]) for r in wl)
    n = sum(c.values())
    conv = (c[("Conversation log", "ChatGPT")] + c[("Conversation log", "GPT-4")]) / n
    gpt4 = (c[("Conversation log", "GPT-4")] + c[("API log", "GPT-4")]) / n
    assert conv == pytest.approx(0.3, abs=0.03)
    assert gpt4 == pytest.approx(0.25, abs=0.03)
    only = build_workload({"kind": "burstgpt_like", "log_type": "Conversation log", "num_requests": 50}, seed=0)
    assert {r.extra["log_type"] for r in only} == {"Conversation log"}


def _service_sample(service: str, n: int = 400_000) -> tuple[np.ndarray, np.ndarray]:
    """Lengths of a service's requests, models in the trace's conversation split (0.676 ChatGPT)."""
    shares = {"ChatGPT": 0.676, "GPT-4": 0.324} if service == "conversation" else {"ChatGPT": 1.0}
    parts = [_Stream.build(DEFAULT_STREAMS[(service, m)], 1.0).lengths(np.random.default_rng(0), int(n * s), None,
                                                                        None) for m, s in shares.items()]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@pytest.mark.parametrize("service,req,res,corr", [
    # third-party measurements on BurstGPT_3: mean, p50, p90, p99 of request / response tokens; Pearson r
    ("api", (457, 326, 794, 3141), (68.9, 14, 111, 804), 0.18),
    ("conversation", (953, 517, 2354, 5630), (272, 187, 669, 1067), 0.44),
])
def test_defaults_reproduce_the_measured_numbers(service: str, req: tuple, res: tuple, corr: float) -> None:
    """The record of docs/workloads.md's fit table: within 6 % (requests), 16 % (responses) of the targets."""
    p, o = _service_sample(service)
    for got, want, tol in ((p, req, 0.06), (o, res, 0.16)):
        stats = [got.mean(), *np.percentile(got, [50, 90, 99])]
        assert stats == pytest.approx(list(want), rel=tol)
    assert np.corrcoef(p, o)[0, 1] == pytest.approx(corr, abs=0.03)
    if service == "conversation":  # the per-model means measured on the conversation rows
        for model, mean_req, mean_res in (("ChatGPT", 785, 198), ("GPT-4", 1304, 427)):
            s = _Stream.build(DEFAULT_STREAMS[(service, model)], 1.0)
            assert s.request.mean == pytest.approx(mean_req, rel=0.02)
            assert s.response.mean == pytest.approx(mean_res, rel=0.06)


def test_clipping_and_config_errors() -> None:
    wl = build_workload({"kind": "burstgpt_like", "num_requests": 2000, "max_prompt": 600, "max_output": 50,
                         "mix": {"conversation": 1}}, seed=0)
    reqs = list(wl)
    assert max(r.prompt_tokens for r in reqs) == 600 and max(r.output_tokens for r in reqs) == 50
    assert len(list(build_workload({"kind": "burstgpt_like", "max_requests": 5}, seed=0))) == 5
    bad = [({"model": "gpt-4"}, r"workload\.model: expected one of \['ChatGPT', 'GPT-4'\]"),
           ({"mix": {"chat": 1}}, r"workload\.mix: expected a mapping of \['conversation', 'api'\]"),
           ({"mix": {"api": 1}, "log_type": "API log"}, r"workload: expected either 'mix' or 'log_type'"),
           ({"log_type": "api logs"}, r"workload\.log_type: expected one of"),
           ({"api": {"cv": 0}}, r"workload\.api\.cv"),
           ({"api": {"request": {"theta": 1.1, "mn": 3}}}, r"workload\.api\.request: unknown key 'mn'"),
           ({"conversation": {"profile": [0, 0]}}, r"conversation\.profile: expected at least one value > 0"),
           ({"start_hour": 24}, r"workload\.start_hour: expected a value < 24")]
    for extra, match in bad:
        with pytest.raises(ConfigError, match=match):
            list(build_workload({"kind": "burstgpt_like", "num_requests": 5, **extra}, seed=0))
    with pytest.raises(ConfigError, match=r"'num_requests', 'duration' or 'max_requests'"):
        build_workload({"kind": "burstgpt_like"}, seed=0)
    with pytest.raises(ConfigError, match=r"expects .* requests a day; expected at least 0.01"):
        BurstGPTLike(rate=1e-9, num_requests=5)
    with pytest.raises(ConfigError, match=r"^duration: .* expected at most 1e\+09 without an explicit 'num_requests'"):
        BurstGPTLike(rate=1e6, duration=1e6)
    with pytest.raises(ConfigError, match=r"expected at least one request before duration=0.001 s"):
        list(BurstGPTLike(rate=0.01, duration=0.001))


@pytest.mark.parametrize("kind", ["burstgpt_like", "shared_prefix"])
def test_max_requests_alone_counts_requests_after_the_window(kind: str) -> None:
    """``max_requests`` counts simulated requests, after the window: bounding the generator by it gave fewer (74 of
    100 with a window from 60 s) or an empty window (from 3600 s) once it also bounded the source."""
    cfg = {"kind": kind, "max_requests": 100}
    if kind == "shared_prefix":
        cfg |= {"arrival": {"process": "poisson", "rate": 1.0}, "user": {"dist": "fixed", "value": 5},
                "output": {"dist": "fixed", "value": 5}}
    for window in ([60, 7200], [3600, 7200]):
        wl = build_workload({**cfg, "window": window}, seed=0)
        reqs = list(wl)
        assert len(reqs) == 100 and wl.stats.stopped == "max_requests"
        assert [r.id for r in reqs] == list(range(100)) and reqs[-1].arrival < window[1] - window[0]
    assert len(list(build_workload(cfg, seed=0))) == 100  # no window: max_requests bounds the source, as before
    with pytest.raises(ConfigError, match=rf"^workload: max_requests alone cannot bound a {kind} stream cut by the "
                                          r"open window \[60, null\): expected a window end, 'num_requests' or "):
        build_workload({**cfg, "window": [60, None]}, seed=0)


@pytest.mark.parametrize(("overrides", "message"), [
    ([1], "overrides: expected a mapping of service to parameters, got [1]"),
    ({"api": 5}, "api: expected a mapping of a service's parameters, got 5"),
    ({"api": {"request": 5}}, "api.request: expected a mapping of theta, min, max, got 5"),
    ({"api": {"response": 5}}, "api.response: expected a list of [weight, median, sigma] modes, got 5"),
    ({"conversation": {"response": [5]}}, "conversation.response: expected a list of [weight, median, sigma] modes"),
])
def test_malformed_overrides_are_one_line_from_the_constructor(overrides: object, message: str) -> None:
    """The Python constructor raised a bare TypeError for overrides of the wrong shape (the config path's schema
    caught them first)."""
    with pytest.raises(ConfigError) as e:
        BurstGPTLike(num_requests=5, overrides=overrides)  # type: ignore[arg-type]
    assert str(e.value).startswith(message)
