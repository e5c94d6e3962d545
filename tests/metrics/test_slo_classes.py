"""Request classes with their own SLOs (``slo.classes``): each request is held to its class's targets, dropped
requests count as misses of their class, and the summary reports attainment and goodput per class."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.errors import ConfigError
from llmsim.schema import SLO
from llmsim.testing import LinearProfile, requests

pytestmark = pytest.mark.timeout(60)


def classed(rows, classes):
    reqs = requests(rows)
    for r, c in zip(reqs, classes):
        r.slo_class = c
    return reqs


def test_each_class_is_held_to_its_own_targets_and_drops_count_as_misses() -> None:
    rng = np.random.default_rng(0)
    n = 80
    rows = [(float(t), int(p), int(o)) for t, p, o in zip(np.cumsum(rng.exponential(0.02, n)),
                                                          rng.integers(10, 400, n), rng.integers(5, 200, n))]
    rows[5] = (rows[5][0], 10**6, 5)  # a prompt no instance can hold: dropped (a "batch" request)
    classes = ["latency_sensitive" if i % 3 == 0 else "batch" for i in range(n)]
    slo = SLO.parse({"e2el_ms": 1e9, "classes": {"latency_sensitive": {"e2el_ms": 11000.0},
                                                 "batch": {"e2el_ms": 14000.0, "ttft_ms": 6000.0}}})
    res = simulate([InstanceConfig(profile=LinearProfile()) for _ in range(2)], classed(rows, classes), "jsq",
                   slo=slo, on_unservable="drop")
    df, s = res.requests, res.summary
    assert s["dropped"] == 1 and "slo_class" in df.columns
    ls, bt = df[df.slo_class == "latency_sensitive"], df[df.slo_class == "batch"]
    want_ls = (ls.e2el_ms <= 11000).sum() / len(ls)
    want_bt = ((bt.e2el_ms <= 14000) & (bt.ttft_ms <= 6000)).sum() / (len(bt) + 1)  # + the dropped batch request
    assert s["slo_attainment_latency_sensitive"] == pytest.approx(want_ls)
    assert s["slo_attainment_batch"] == pytest.approx(want_bt)
    assert 0 < want_ls < 1 and 0 < want_bt < 1  # the deadlines bite for some requests: the check is not vacuous
    overall = ((ls.e2el_ms <= 11000).sum() + ((bt.e2el_ms <= 14000) & (bt.ttft_ms <= 6000)).sum()) / n
    assert s["slo_attainment"] == pytest.approx(overall)
    assert s["request_goodput_batch"] == pytest.approx(want_bt * (len(bt) + 1) / s["duration"])


def test_requests_without_a_listed_class_use_the_top_level_targets() -> None:
    reqs = classed([(0.0, 100, 50), (0.0, 100, 50)], [None, "other"])
    s = simulate([InstanceConfig(profile=LinearProfile())], reqs, slo=SLO.parse(
        {"e2el_ms": 1e-3, "classes": {"ls": {"e2el_ms": 1e9}}})).summary
    assert s["slo_attainment"] == 0.0 and np.isnan(s["slo_attainment_ls"])  # nobody in class ls


def test_no_classes_keeps_the_old_summary() -> None:
    s = simulate([InstanceConfig(profile=LinearProfile())], requests([(0.0, 100, 50)]),
                 slo=SLO.parse({"e2el_ms": 1e9})).summary
    assert s["slo_attainment"] == 1.0 and not any(k.startswith("slo_attainment_") for k in s)


@pytest.mark.parametrize("bad,needle", [({"classes": {"ls": {"e2el_ms": -1}}}, "e2el_ms"),
                                        ({"classes": {"ls": {"deadline": 3}}}, "deadline"),
                                        ({"classes": {"": {"e2el_ms": 3}}}, "classes")])
def test_bad_class_targets_name_the_key(bad, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        SLO.parse(bad)
