"""The past-only rollout as a teacher: its labels, and a set network fitted to them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.studies import rollout_distill, rollout_labels
from llmsim.agents.checkpoint import load_q_net
from llmsim.agents.env_setup import make_env
from llmsim.agents.nets import LOG_WORK_S, SPILL_GUIDE, guide_slots
from llmsim.routing import make_router
from tests.experiments.helpers import mid_episode, usage_error


@pytest.mark.timeout(240)
def test_the_labels_hold_each_allowed_instances_cost_and_the_episode_takes_the_teachers_choice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = rollout_labels.label_env("training", 16)
    out = rollout_labels.label_episode(cfg, "least_work_left", 3, 1, tmp_path)
    d = np.load(tmp_path / "labels_3.npz")
    n = out["decisions"]
    assert n > 5 and d["obs"].shape == (n, 232) and d["allowed"].shape == d["cost_ms"].shape == (n, 16)
    assert np.array_equal(np.isfinite(d["cost_ms"]), d["allowed"]) and d["allowed"][np.arange(n), d["base"]].all()
    # the teacher's choice: the lowest cost, ties to the base's choice
    teacher = [b if c[b] == np.nanmin(c) else int(np.nanargmin(c)) for c, b in zip(d["cost_ms"], d["base"])]
    assert out["changed"] == sum(t != b for t, b in zip(teacher, d["base"])) > 0
    assert list(d["taken"]) == teacher
    assert "training seeds only" in usage_error(
            rollout_labels.main, ["--seeds", "1000", "--out", str(tmp_path)], capsys)


def test_the_gain_is_per_cent_of_the_base_choices_cost() -> None:
    g = rollout_distill.gain_pct(np.array([[100.0, 90.0, np.nan], [50.0, 40.0, 60.0]]), np.array([0, 1]))
    assert np.allclose(g[0, :2], [0.0, 10.0]) and np.isnan(g[0, 2]) and np.allclose(g[1], [-25.0, 0.0, -50.0])


@pytest.mark.timeout(240)
def test_the_fitted_network_ranks_instances_as_its_teacher(tmp_path: Path) -> None:
    # a teacher whose gain is the queued work an instance saves over the base's: the least work left is best
    env = make_env(rollout_labels.label_env("rate_1.5x", 60))
    obs, _ = env.reset(seed=5, options={"workload_seed": 5})
    router, rng = make_router("round_robin"), np.random.default_rng(0)
    xs, masks = [], []
    while not (env.terminated or env.truncated):
        m = env.action_masks()[: env.n_choices]
        a = env.heuristic_action(router)
        if env.pending is not None and m.sum() > 1:
            xs.append(np.asarray(obs, np.float32))
            masks.append(np.isin(np.arange(16), np.flatnonzero(m)))
            a = int(rng.choice(np.flatnonzero(m)))
        obs, *_ = env.step(a)
    x, allowed = np.array(xs), np.array(masks)
    base = np.maximum(guide_slots(x, SPILL_GUIDE, rollout_distill.GUIDE_SPILL), 0)
    net = rollout_distill.new_net(232, [32, 32])
    work = net.split(torch.as_tensor(x))[1][:, :, LOG_WORK_S].numpy()
    target = np.where(allowed, 100.0 * (work[np.arange(len(x)), base][:, None] - work), np.nan)
    assert np.nanmax(target, axis=1).mean() > 0.5  # the base is often not the teacher's choice
    before = rollout_distill.kept_gain(net, x, allowed, target)
    rollout_distill.fit(net, x, allowed, base, target, steps=1500, batch=64, lr=3e-3)
    after = rollout_distill.kept_gain(net, x, allowed, target)
    assert after["agree"] > 0.8 and after["net_gain_pct"] > 0.8 * after["teacher_gain_pct"] > before["net_gain_pct"]
    again = rollout_distill.new_net(232, [32, 32])  # the same seed: the same weights, bit for bit
    rollout_distill.fit(again, x, allowed, base, target, steps=1500, batch=64, lr=3e-3)
    assert all(torch.equal(p, q) for p, q in zip(net.state_dict().values(), again.state_dict().values()))
    # saved at a margin, it loads as the shipped set policy does, margin included
    info = {"steps": 1500}
    path = rollout_distill.save(net, tmp_path, 0.5, info)
    loaded = load_q_net(path)
    assert float(loaded.fallback_margin) == 0.5 and loaded.guide == SPILL_GUIDE and loaded.spill.min_group == 2
    # DAgger's next round: the episode takes the learner's choices (at margin 1000 its guide's), the teacher labels
    guide = rollout_distill.save(net, tmp_path, 1000.0, info)
    rollout_labels.label_episode(rollout_labels.label_env("training", 12), "least_work_left", 4, 1, tmp_path, guide)
    d = np.load(tmp_path / "labels_4.npz")
    assert list(d["taken"]) == list(guide_slots(d["obs"], SPILL_GUIDE, rollout_distill.GUIDE_SPILL))


@pytest.mark.timeout(240)
def test_a_horizon_prices_only_the_requests_it_spans_and_the_prices_repeatability_is_measured(
        capsys: pytest.CaptureFixture[str]) -> None:
    import copy

    from experiments.studies import past_only_rollout as por

    cfg = rollout_labels.label_env("rate_1.5x", 20)
    env, router, a = mid_episode(cfg, 9, 6)
    full = por.finish(*copy.deepcopy((env, router)), a)
    assert por.finish(*copy.deepcopy((env, router)), a, 20) == full  # a window of every request is the whole mean
    e, r = copy.deepcopy((env, router))
    window = por.finish(e, r, a, 8)
    assert window != full and not e.terminated  # stopped once the window's requests were served ...
    assert window == por.finish(*copy.deepcopy((env, router)), a, 8, stop_early=False)  # ... at the same price
    out = rollout_labels.reliability(cfg, "least_work_left", 9, 3, 1, horizon=5)
    assert out["decisions"] == 3 and -1.0 <= out["gain_corr"] <= 1.0 and 0.0 <= out["same_pick"] <= 1.0
    assert "expected >= 1" in usage_error(
            rollout_labels.main, ["--seeds", "9", "--horizon", "0", "--reliability", "3"], capsys)
    # the control: share 0 is the base's own episode, share 1 a random router's
    from llmsim.agents.episodes import evaluate

    base_ms = evaluate(cfg, ["least_work_left"], seeds=[1009])[0]["mean_e2el_ms"]
    assert rollout_labels.random_deviation(cfg, "least_work_left", 1009, 0.0) == base_ms
    assert rollout_labels.random_deviation(cfg, "least_work_left", 1009, 1.0) != base_ms
    assert "shares in" in usage_error(rollout_labels.main, ["--seeds", "9", "--control", "1.5"], capsys)


@pytest.mark.timeout(240)
def test_the_distillation_command_reports_held_out_folds_and_each_margin_against_the_best_heuristic(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    cfg = rollout_labels.label_env("training", 12)
    for seed in (1, 2):
        rollout_labels.label_episode(cfg, "least_work_left", seed, 1, tmp_path / "labels")
    cache = tmp_path / "heuristics.json"
    rollout_distill.main(["--labels", str(tmp_path / "labels"), "--out", str(tmp_path / "net"), "--steps", "20",
                          "--folds", "2", "--margins", "0", "1000", "--scenarios", "training", "--seeds", "1000",
                          "--requests", "12", "--jobs", "1", "--heuristics-cache", str(cache), "--seen-slack", "0.1"])
    out = json.loads((tmp_path / "net" / "validation_12.json").read_text())
    assert out["fit"]["seen_slack"] == 0.1 and load_q_net(tmp_path / "net" / "margin_0").seen is not None
    # per slice of the requests in arrival order: equal slices average to the episode's mean
    slices = rollout_distill.by_arrival({0.0: tmp_path / "net" / "margin_0"}, "training", [1000], 12, 3)[0]
    assert len(slices["slices_s"]) == 3 and np.mean(slices["slices_s"]) == pytest.approx(slices["mean_s"])
    assert [f["episode"] for f in out["fit"]["held_out"]["folds"]] == [1, 2]
    row = out["rows"][0]
    assert row["scenario"] == "training" and set(json.loads(cache.read_text())) == {"training|12|1000"}
    assert {"margin_0", "margin_1000"} <= set(row) and len(row["margin_0"]["per_seed"]) == 1
    assert 0.0 <= row["margin_0"]["unseen_share"] <= 1.0
    assert "validation seeds only" in usage_error(
            rollout_distill.main, ["--labels", str(tmp_path), "--out", str(tmp_path), "--seeds", "2000"], capsys)
    data = rollout_distill.load_labels(tmp_path / "labels")
    quarters = rollout_distill.by_quarter(data, rollout_distill.gain_pct(data["cost_ms"], data["base"]))
    assert [q["quarter"] for q in quarters] == [1, 2, 3, 4] and all(0 <= q["changed"] <= 1 for q in quarters)
    changed = np.mean([q["changed"] for q in quarters])  # equal quarters of two equal-length episodes
    teacher = [b if c[b] == np.nanmin(c) else int(np.nanargmin(c)) for c, b in zip(data["cost_ms"], data["base"])]
    assert changed == pytest.approx(np.mean(np.array(teacher) != data["base"]))


@pytest.mark.parametrize(("option", "value"), [("--hidden", "0"), ("--hidden", "-3"), ("--by-arrival", "-1")])
def test_a_layer_without_units_or_a_negative_slice_count_is_one_usage_line_naming_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    # before: --hidden 0 fitted a network with an empty layer, -3 ended in a torch traceback, and a negative
    # --by-arrival was taken as "off" in silence
    err = usage_error(rollout_distill.main, ["--labels", str(tmp_path), "--out", str(tmp_path),
                                             "--checkpoints", str(tmp_path), option, value], capsys)
    assert f"argument {option}: expected" in err and repr(value) in err, err
