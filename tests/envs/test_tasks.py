"""Task / quality models, labelled-data loader, YAML configs and predictors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from llmsim.envs.predictors.base import NoisyOraclePredictor, OraclePredictor
from llmsim.envs.tasks import (
    BEST_EFFORT_ACCURACY,
    WORKLOAD_ROUTER_TASKS,
    LabelledPool,
    TaskMixture,
    TaskSpec,
    best_effort_arrivals,
    best_effort_mixture,
    qos_edge_mixture,
    workload_router_mixture,
)
from llmsim.envs.testbeds import make_from_config
from llmsim.envs.workloads import MIXTURE_PRESETS, LabelledWorkload, MixtureWorkload, make_workload
from llmsim.errors import ConfigError, TraceError
from llmsim.workload import ARRIVAL_PRESETS, RandomPhases
from tests.helpers import REPO

CONF = REPO / "conf" / "env"


def test_workload_router_mixture_matches_table1():
    mix = workload_router_mixture()
    reqs = mix.sample(np.random.default_rng(0), np.arange(40_000) * 0.05)
    by_task: dict[str, list] = {}
    for r in reqs:
        by_task.setdefault(r.task, []).append(r)
    for name, p_mean, d_mean, _ in WORKLOAD_ROUTER_TASKS:
        rs = by_task[name]
        assert np.mean([r.prompt_tokens for r in rs]) == pytest.approx(p_mean, rel=0.06)
        assert np.mean([r.output_tokens for r in rs]) == pytest.approx(d_mean, rel=0.08)
    shares = np.array([len(by_task[n]) for n, *_ in WORKLOAD_ROUTER_TASKS]) / len(reqs)
    assert shares == pytest.approx(np.array([7351, 6988, 6564, 7122, 3304]) / 31329, abs=0.01)
    assert max(r.prompt_tokens + r.output_tokens for r in reqs) <= 4096


def test_best_effort_mixture_qualities_are_the_accuracy_table():
    reqs = best_effort_mixture().sample(np.random.default_rng(1), np.arange(200) * 0.1)
    for r in reqs:
        assert tuple(r.quality_by_model[m] for m in ("opt-125m", "opt-1.3b", "opt-6.7b")) == \
            BEST_EFFORT_ACCURACY[r.task]


def test_qos_mixture_per_expert_quality_and_length():
    reqs = qos_edge_mixture().sample(np.random.default_rng(2), np.arange(5000) * 0.2)
    q = {m: np.mean([r.quality_by_model[m] for r in reqs]) for m in reqs[0].quality_by_model}
    assert q["alpaca-native"] > q["mpt-7b-instruct"]
    lens = {m: np.mean([r.outputs_by_model[m] for r in reqs]) for m in reqs[0].outputs_by_model}
    assert lens["mpt-7b-instruct"] == max(lens.values())
    assert max(max(r.outputs_by_model.values()) for r in reqs) <= 300


def test_bursty_arrivals_sorted_with_rates():
    t, rates = best_effort_arrivals(np.random.default_rng(0), "bursty", 5000)
    assert np.all(np.diff(t) >= 0) and len(t) == 5000
    assert rates.min() >= 0.25 and rates.max() <= 48


# Seed 0, first 4 arrivals, the rates and the generator's next draw, from the env's own MMPP before it was
# replaced by llmsim's RandomPhases (one generator): the env workloads did not change.
BEFORE_UNIFICATION = {
    "stable": ([0.0006459062088258354, 0.0007199102055450686, 0.018666895308276643, 0.07182015331065589],
               [30.664920569599442] * 4, 0.6066357757671799),
    "bursty": ([0.0031425600617870095, 0.41200536331133714, 1.9367994069428223, 5.216006944705419],
               [0.7221267490867731, 1.847322260236013, 1.847322260236013, 1.847322260236013], 0.8158535541215322),
    "bursty2": ([0.0006402215790239647, 0.0007135742655073473, 0.01850260769510951, 0.07118806311194599],
                [30.937199304108354] * 4, 0.6066357757671799),
}


@pytest.mark.parametrize("schedule", sorted(BEFORE_UNIFICATION))
def test_env_mmpp_is_llmsims_and_unchanged(schedule):
    rng = np.random.default_rng(0)
    t, rates = best_effort_arrivals(rng, schedule, 4)
    times, rate_list, next_draw = BEFORE_UNIFICATION[schedule]
    assert t.tolist() == times and rates.tolist() == rate_list and rng.random() == next_draw
    if schedule == "bursty":  # the same draws as llmsim's preset, through the same class
        preset = ARRIVAL_PRESETS["best_effort_unpredictable_1"]
        proc = RandomPhases([tuple(c) for c in preset["mixture"]], mean_seconds=preset["mean_seconds"])
        assert proc.sample(np.random.default_rng(0), 4)[0].tolist() == times


@pytest.mark.parametrize(("arrival", "pattern"), [
    ({"kind": "poison", "rate": 2}, r"workload.arrival.kind: unknown arrival kind 'poison'"),
    ({"kind": "poisson"}, r"workload.arrival.rate: missing"),
    ({"kind": "poisson", "rate": float("nan")}, r"workload.arrival.rate: expected a finite number > 0"),
    ({"kind": "bursty", "rate": 3.0}, r"workload.arrival: unknown key\(s\) \['rate'\] for kind 'bursty'"),
    ({"kind": "stable", "rte": 3.0}, r"unknown key\(s\) \['rte'\]"),
])
def test_env_arrival_spec_checked_at_construction(arrival, pattern):
    with pytest.raises(ConfigError, match=pattern):
        MixtureWorkload(best_effort_mixture(), arrival)


def test_mixture_presets_are_a_registry():
    assert list(MIXTURE_PRESETS) == ["best_effort", "qos_edge", "workload_router"]
    with pytest.raises(ConfigError, match=r"workload.preset: unknown mixture preset 'nope'; expected one of"):
        make_workload({"kind": "mixture", "preset": "nope"})
    with pytest.raises(ConfigError, match=r"workload.preset: mixture preset 'qos_edge' rejected its options"):
        make_workload({"kind": "mixture", "preset": "qos_edge", "preset_kwargs": {"expertz": ["a"]}})
    with pytest.raises(ConfigError, match=r"workload: unknown key\(s\) \['arival'\]"):
        make_workload({"kind": "mixture", "arival": {}})
    wl = make_workload({"kind": "mixture", "preset": "qos_edge", "arrival": {"kind": "poisson", "rate": 3}})
    assert len(wl.requests(0, 7)) == 7
    with pytest.raises(ConfigError, match=r"^num_requests: expected an integer >= 1"):
        wl.requests(0, 0)


def test_task_models_check_their_numbers():
    with pytest.raises(ConfigError, match=r"^task 'x'.prompt_mean: expected a finite number > 0"):
        TaskSpec("x", 0.0, out_mean={"m": 5.0}, out_sigma={"m": 0.5})
    with pytest.raises(ConfigError, match=r"^task 'x'.rho_len: expected a finite number >= -1 and <= 1"):
        TaskSpec("x", 5.0, out_mean={"m": 5.0}, out_sigma={"m": 0.5}, rho_len=1.5)
    with pytest.raises(ConfigError, match=r"^task 'x': expected non-empty out_mean"):
        TaskSpec("x", 5.0)
    t = TaskSpec("x", 5.0, out_mean={"m": 5.0}, out_sigma={"m": 0.5})
    with pytest.raises(ConfigError, match=r"^mixture.weights: expected one weight per task"):
        TaskMixture([t], ["m"], weights=[1.0, 2.0])
    with pytest.raises(ConfigError, match=r"^mixture.weights\[0\]: expected a finite number >= 0"):
        TaskMixture([t], ["m"], weights=[float("nan")])


LABELS = "request_id,model,prompt_tokens,output_tokens,quality,task\n"


@pytest.mark.parametrize(("body", "pattern"), [
    ("0,a,10,5,0.5,t\n0,b,10,0,0.5,t\n", r"line 3, column 'output_tokens': expected an integer token count in \[1,"),
    ("0,a,10,5,0.5,t\n0,b,1e30,6,0.5,t\n", r"line 3, column 'prompt_tokens'"),
    ("0,a,10,5,1.5,t\n0,b,10,6,0.5,t\n", r"line 2, column 'quality': expected a number in \[0, 1\]"),
    ("0,a,10,5,0.5,t\n0,a,10,6,0.5,t\n", r"line 3, column 'model': expected one row per \(request_id, model\)"),
    ("0,a,10,5,0.5,t\n1,b,10,6,0.5,t\n", r"line 2, column 'model': expected a row for every model"),
    ("", r"expected at least one labelled row"),
    # a request's prompt and task are the request's, whichever model's row: they used to be taken from its first
    # row silently
    ("0,a,10,5,0.5,t\n0,b,20,6,0.5,t\n", r"line 3, column 'prompt_tokens': expected the prompt_tokens of "
                                          r"request_id '0' as on its first row \(line 2\), 10, got 20"),
    ("0,a,10,5,0.5,t\n0,b,10,6,0.5,u\n", r"line 3, column 'task': expected the task of request_id '0' as on its "
                                          r"first row \(line 2\), 't', got 'u'"),
])
def test_labelled_table_errors_name_line_and_column(tmp_path, body, pattern):
    path = tmp_path / "labels.csv"
    path.write_text(LABELS + body)
    with pytest.raises(TraceError, match=r"labels\.csv: " + pattern):
        LabelledPool.load(path)
    (tmp_path / "x.csv").write_text("request_id,model,prompt_tokens\n0,a,1\n")
    with pytest.raises(TraceError, match=r"x\.csv: line 1 \(header\): missing column\(s\) \['output_tokens'\]"):
        LabelledPool.load(tmp_path / "x.csv")


def test_labelled_empty_quality_is_unknown_and_parquet_reads_the_same(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text(LABELS + "0,a,10,5,,t\n0,b,10,6,0.25,t\n")
    pool = LabelledPool.load(path)
    assert np.isnan(pool.quality[0, 0]) and pool.quality[0, 1] == 0.25
    pd.read_csv(path).to_parquet(tmp_path / "labels.parquet")
    other = LabelledPool.load(tmp_path / "labels.parquet")
    assert other.models == pool.models and other.outputs.tolist() == pool.outputs.tolist()
    assert np.array_equal(other.quality, pool.quality, equal_nan=True)


def test_labelled_pool_round_trip(tmp_path):
    rows = []
    for i in range(5):
        for m, k in (("opt-125m", 1), ("opt-1.3b", 2)):
            rows.append({"request_id": i, "model": m, "prompt_tokens": 10 + i, "output_tokens": 5 * k + i,
                         "quality": 0.1 * k, "task": "copa"})
    path = tmp_path / "labels.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    pool = LabelledPool.load(path)
    assert pool.models == ["opt-1.3b", "opt-125m"]
    reqs = LabelledWorkload(str(path), {"kind": "poisson", "rate": 2.0}).requests(0, 20)
    for r in reqs:
        i = r.prompt_tokens - 10
        assert r.outputs_by_model == {"opt-1.3b": 10 + i, "opt-125m": 5 + i}
        assert r.quality_by_model == pytest.approx({"opt-1.3b": 0.2, "opt-125m": 0.1})


def test_noisy_predictor_buckets():
    reqs = qos_edge_mixture().sample(np.random.default_rng(0), np.arange(10.0))
    models = list(reqs[0].outputs_by_model)
    lens, q = OraclePredictor().predict(reqs[0], models)
    assert list(lens) == [reqs[0].outputs_by_model[m] for m in models]
    p = NoisyOraclePredictor(len_buckets=10, len_max=300, q_buckets=10, seed=0)
    lens, q = p.predict(reqs[0], models)
    assert set(np.round((lens - 15) / 30, 6)) <= set(range(10))
    assert np.all((q * 20) % 2 == pytest.approx(1.0))


@pytest.mark.parametrize("name", sorted(p.name for p in CONF.glob("*.yaml")))
def test_env_yaml_configs_build(name):
    cfg = yaml.safe_load((CONF / name).read_text())
    cfg["num_requests"] = 10
    if cfg.get("workload", {}).get("num_requests"):
        cfg["workload"]["num_requests"] = 10
    env = make_from_config(cfg)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)


def test_testbed_clusters_are_the_documented_ones():
    from llmsim.envs.testbeds import qos_edge_instances, static_instances, workload_router_instances

    wr = workload_router_instances()
    prof = wr[0].build_profile()
    assert len(wr) == 4 and wr[0].gpu == "v100-16gb" and wr[0].engine.max_num_seqs == 128
    # 0.97 is the smallest share (in hundredths) whose KV cache holds the 4,096-token context window
    assert prof.kv_capacity_tokens(0.97) >= 4096 > prof.kv_capacity_tokens(0.96)
    assert all(i.profile is not None and i.profile.base > 0.01 for i in qos_edge_instances())
    assert [i.engine.gpu_memory_utilization for i in static_instances("opt-1.3b", 8)] == [0.9] * 8


def test_workload_router_mixture_spans_the_predictor_buckets():
    reqs = workload_router_mixture().sample(np.random.default_rng(3), np.arange(20_000) * 0.05)
    out = np.array([r.output_tokens for r in reqs])
    shares = [np.mean(out <= 250), np.mean((out > 250) & (out <= 1000)), np.mean(out > 1000)]
    assert shares[0] > 0.7 and shares[1] > 0.1 and 0.005 < shares[2] < 0.05


def test_a_labelled_table_must_label_the_cluster_s_models(tmp_path):
    """Rows for models the cluster does not serve used to be simulated silently with another model's output length
    and no quality (a model column spelt 'Llama-2-7b-chat' for the cluster's llama-2-7b, say)."""
    import gymnasium as gym

    path = tmp_path / "labels.csv"
    path.write_text(LABELS + "0,foo,10,5,0.5,t\n1,foo,12,6,0.5,t\n")
    with pytest.raises(ConfigError, match=r"^workload: the labelled table .*labels\.csv has rows for models "
                                          r"\['foo'\], none for the cluster's 'llama-2-7b'$"):
        gym.make("llmsim/Routing-v0", num_requests=4, workload={"kind": "labelled", "path": str(path)})
    path.write_text(LABELS + "0,llama-2-7b,10,5,0.5,t\n0,foo,10,7,0.5,t\n")
    env = gym.make("llmsim/Routing-v0", num_requests=4, workload={"kind": "labelled", "path": str(path)})
    env.reset(seed=0)
    assert {r.output_for("llama-2-7b") for r in env.unwrapped.episode_requests} == {5}
