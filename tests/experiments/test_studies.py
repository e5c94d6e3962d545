"""The choice studies' rules (experiments/studies): what they refuse (test seeds, the suite's trace windows), how
they choose (best worst case, then best mean) and the held-out trace's 3 s buckets, without running episodes."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from experiments.studies import (
    guide_choice,
    load_gate,
    load_gate_guide,
    past_only_rollout,
    qlm_r2,
    rollout_distill,
    rollout_headroom,
    rollout_labels,
    spill_load,
    validation,
)
from llmsim.agents.nets import SPILL
from llmsim.agents.suite_config import load_suite_file
from llmsim.errors import ConfigError, TraceError
from llmsim.routing import make_router
from tests.experiments.helpers import usage_error
from tests.helpers import REPO


def test_guide_choice_takes_the_best_worst_case_then_the_best_mean() -> None:
    table = {"a": {"jsq": {"mean": 10.0}, "least_kv": {"mean": 0.0}, "edf": {"mean": 0.0}, "ckpt:x": {"mean": -9.0}},
             "b": {"jsq": {"mean": 10.0}, "least_kv": {"mean": 30.0}, "edf": {"mean": 10.04}, "ckpt:x": {"mean": -9.0}}}
    assert guide_choice.choose(table) == "edf"  # worst 10.0 after rounding, mean 5.02 < jsq's 10; never a checkpoint
    assert guide_choice.kind("dedicated_small_large") == "stateful" and guide_choice.kind("edf") == "holds"
    assert guide_choice.kind("least_work_left") == "stateless"


def test_guide_choice_reads_observation_guides_and_never_picks_one() -> None:
    g = guide_choice.guide_policy("dedicated_split_spill:1.5:log_work_s")
    assert (g.guide, g.spill.ratio, g.spill.score) == ("dedicated_split_spill", 1.5, "log_work_s")
    assert guide_choice.guide_policy("dedicated_split_spill").spill == SPILL
    assert guide_choice.guide_policy("dedicated_split_spill:1:log_latency_s:1.5").spill.load == 1.5
    for bad in ("least_kv", "dedicated_split_spill:0.5", "dedicated_split_spill:x", "dedicated_split_spill:2:nope"):
        with pytest.raises(ConfigError, match="--guides"):
            guide_choice.guide_policy(bad)
    table = {"a": {"jsq": {"mean": 0.0}, "guide:dedicated_split": {"mean": -50.0}}}
    assert guide_choice.kind("guide:dedicated_split") == "guide" and guide_choice.choose(table) == "jsq"


def test_spill_load_takes_the_best_worst_case_over_both_lengths_among_spill_rules() -> None:
    def table(a: float, b: float) -> dict[str, dict[str, dict[str, float]]]:
        return {"x": {"least_kv": {"mean": 0.0}, "spill 1.1 load 0.0": {"mean": a}, "spill 1.0 load 1.5": {"mean": b}}}
    tables = {400: table(5.0, 12.0), 1000: table(30.0, 10.0)}
    assert spill_load.choose(tables) == [("spill 1.0 load 1.5", 12.0, 11.0), ("spill 1.1 load 0.0", 30.0, 17.5)]
    labels = [c["label"] for c in spill_load.candidates() if isinstance(c, dict)]
    assert "spill 1.0 load 1.5" in labels and "spill 1.1 load 0.0" in labels
    light = [c for c in spill_load.candidates(light_load=True) if isinstance(c, dict) and " light " in c["label"]]
    assert len(light) == len(spill_load.LIGHT_LOAD_RULES)
    assert all(c["kwargs"]["kv_aware"] and c["kwargs"]["spill_load_light"] >= 1.5 for c in light)
    for c in light:  # every candidate is a valid router config
        make_router(c["name"], **c["kwargs"])
    by_size = [c["kwargs"] for c in spill_load.candidates(by_size=True) if isinstance(c, dict)]
    assert by_size == [{"within": "least_latency"}, {"within": "least_latency", "spill": 1.0, "spill_load": 1.5},
                       {"within": "least_latency", "spill": 1.0, "spill_load": 1.5, "spill_min_group": 2}]
    queued = [c for c in spill_load.candidates(queued=True) if isinstance(c, dict) and "queue" in c["label"]]
    assert len(queued) == len(spill_load.QUEUED_RULES) and all(not c["kwargs"]["spill_queued"] for c in queued)
    for c in queued:
        make_router(c["name"], **c["kwargs"])
    balanced = [c for c in spill_load.candidates(heavy_share=True, shares=(0.5, 0.7)) if isinstance(c, dict)
                and "balance" in c["label"]]
    assert [c["kwargs"]["balance_heavy"] for c in balanced] == [0.5, 0.7]
    for c in balanced:
        make_router(c["name"], **c["kwargs"])
    with_ckpt = {400: {"x": {"least_kv": {"mean": 0.0}, "ckpt:new": {"mean": 3.0}, "spill, balance above 0.5":
                             {"mean": 1.0}}}}
    assert [p for p, *_ in spill_load.choose(with_ckpt)] == ["spill, balance above 0.5", "ckpt:new"]


def test_spill_load_says_what_is_wrong_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit):
        spill_load.main(["--heavy-share", "--checkpoints", "oops"])
    assert "expected NAME=PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        spill_load.main(["--heavy-share", "--balance", "1.5", "--scenarios", "training", "--seeds", "1000",
                         "--requests", "50"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "policy.kwargs.balance_heavy" in err
    assert err.startswith("python -m experiments.studies.spill_load: error: ")


def test_guide_choice_gaps_are_to_the_best_heuristic_not_a_checkpoint() -> None:
    rows = [{"policy": p, "mean_e2el_ms": m, "p99_e2el_ms": 2 * m} for p, m in
            (("jsq", 100.0), ("jsq", 120.0), ("least_kv", 150.0), ("ckpt:x", 50.0))]
    gaps = guide_choice.scenario_gaps(rows, {"ckpt:x"})
    assert gaps["jsq"]["mean"] == 0.0 and gaps["least_kv"]["mean"] == pytest.approx(100.0 * (150 / 110 - 1))
    assert gaps["ckpt:x"]["mean"] < 0.0


def test_the_studies_refuse_test_data(capsys) -> None:
    suite = load_suite_file("workload_router")
    trace = next(n for n, s in suite.scenarios.items() if s.trace)
    with pytest.raises(ConfigError, match="test data only"):
        validation.seed_drawn("workload_router", [trace], 100)
    assert trace not in validation.seed_drawn("workload_router")  # all seed-drawn ones: the windows left out
    for study in (guide_choice, spill_load):
        with pytest.raises(SystemExit) as e:
            study.main(["--seeds", "2000"])
        assert e.value.code == 2 and "validation seeds only" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="test data"):
        load_gate.trace_scenarios(Path("conversation_trace.jsonl"), [0, 60], [0], "qos_edge", Path("."))
    with pytest.raises(SystemExit) as e:
        guide_choice.main(["--scenarios", trace, "--requests", "10"])
    assert e.value.code == 2 and "is a trace window (test data only)" in capsys.readouterr().err


STUDIES = (guide_choice, load_gate, load_gate_guide, past_only_rollout, rollout_distill, rollout_headroom, spill_load)


@pytest.mark.parametrize("study", STUDIES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_study_refuses_bad_input_as_argparse_does(study, capsys) -> None:
    """A test seed was a bare message with exit status 1 (argparse's own errors: status 2, the command named)."""
    prog = f"python -m {study.__name__}: error: "
    for argv, message in ((["--seeds", "5"], "argument --seeds: 5: validation seeds only (1000-1999)"),
                          (["--jobs", "0"], "argument --jobs: expected a positive integer, got '0'")):
        with pytest.raises(SystemExit) as e:
            study.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.strip().splitlines()[-1].startswith(prog + message)


OUT_STUDIES = (guide_choice, load_gate, load_gate_guide, past_only_rollout, rollout_headroom, spill_load)


@pytest.mark.parametrize("study", OUT_STUDIES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_study_checks_its_out_file_before_running(study, tmp_path: Path, capsys) -> None:
    """An --out that was a directory (or under a file) was an IsADirectoryError traceback once the study was over."""
    (tmp_path / "a_file").write_text("")
    under = tmp_path / "a_file" / "t.md"
    for out, message in ((tmp_path, f"{tmp_path}: is a directory; expected a file name"),
                         (under, f"{under}: cannot write a file in {tmp_path / 'a_file'} (Not a directory)")):
        assert f"argument --out: {message}" in usage_error(study.main, ["--out", str(out)], capsys)


def test_rollout_labels_refuses_bad_input_as_argparse_does(capsys) -> None:
    for argv, message in ((["--seeds", "1500"], "--seeds [1500]: training seeds only"),
                          (["--seeds", "1", "--samples", "0"], "--samples 0 / --horizon None: expected >= 1"),
                          (["--seeds", "1", "--jobs", "-1"], "argument --jobs: expected a positive integer")):
        with pytest.raises(SystemExit) as e:
            rollout_labels.main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--requests", "0"], "argument --requests: expected a positive integer, got '0'"),
    (["--rate", "-1"], "argument --rate: expected a positive number, got '-1'"),
    (["--tp", "0"], "argument --tp: expected a positive integer, got '0'"),
    (["--model", "nope"], "cannot load a profile: unknown model 'nope'"),
])
def test_qlm_r2_refuses_bad_input_in_one_line(argv, message, capsys) -> None:
    """Each was a traceback (ValueError, ProfileError) with exit status 1."""
    assert message in usage_error(qlm_r2.main, ["--r2", *argv], capsys)


def test_load_gate_names_a_trace_it_cannot_read(tmp_path: Path, capsys) -> None:
    """A missing --trace was a FileNotFoundError traceback, a bad row a JSONDecodeError one."""
    missing = tmp_path / "held_out.jsonl"
    with pytest.raises(TraceError, match=f"--trace {missing}: no such file"):
        load_gate.trace_scenarios(missing, [0, 4], [0, 3], "qos_edge", tmp_path)
    missing.write_text('{"timestamp": 0}\nnot json\n')
    with pytest.raises(TraceError, match=f"--trace {missing} line 2: expected a JSON object"):
        load_gate.bucketed(missing, 3.0, tmp_path)
    missing.write_text('{"time": 0}\n')
    with pytest.raises(TraceError, match="line 1: expected a JSON object with a numeric 'timestamp'"):
        load_gate.bucketed(missing, 3.0, tmp_path)
    with pytest.raises(SystemExit) as e:
        load_gate.main(["--trace", str(tmp_path / "nope.jsonl"), "--requests", "10"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "nope.jsonl: no such file" in err


def test_the_conversation_proxies_read_sharegpt_lengths_never_a_suite_trace() -> None:
    envs = validation.seed_drawn("workload_router", ["training", "sharegpt_1"], 300)
    assert set(envs) == {"training", "sharegpt_1"}
    wl = envs["sharegpt_1"]["workload"]
    assert wl["arrival"]["rate"] == 1.0 and wl["num_requests"] == 300
    assert Path(wl["lengths"]["path"]).name not in validation.suite_traces("workload_router")
    assert "sharegpt_2" in validation.seed_drawn("workload_router", ["sharegpt_2"])
    assert not set(validation.PROXY_RATES) & set(validation.seed_drawn("workload_router"))  # asked for by name only
    assert {"sharegpt_0.5", "sharegpt_1"} <= set(spill_load.BATCH_SCENARIOS)
    for c in spill_load.candidates(batch_seats=True):
        if isinstance(c, dict):
            make_router(c["name"], **c["kwargs"])


def test_load_gate_choice_and_the_bucketed_copy(tmp_path: Path) -> None:
    table = {"s1": {"network": 9.0, "A": -0.04, "B": 5.0}, "s2": {"network": 9.0, "A": 8.0, "B": -2.0}}
    assert load_gate.choose(table) == "A"  # worst -0.0 beats -2.0; the ungated network is not a candidate
    src = tmp_path / "held_out.jsonl"
    src.write_text("".join(json.dumps({"timestamp": t, "input_length": 10, "output_length": 5}) + "\n"
                           for t in (0, 2999, 3000, 7500)))
    out = load_gate.bucketed(src, 3.0, tmp_path)
    assert [json.loads(x)["timestamp"] for x in out.read_text().splitlines()] == [0, 0, 3000, 6000]
    scen = load_gate.trace_scenarios(src, [0, 4, 8], [0, 3], "qos_edge", tmp_path)
    assert sorted(scen) == ["held_out_0-4", "held_out_4-8", "held_out_b3s_0-4", "held_out_b3s_4-8"]


@pytest.mark.timeout(240)
def test_the_rollout_replays_the_base_and_is_never_worse_than_it(capsys: pytest.CaptureFixture[str]) -> None:
    from llmsim.agents.episodes import evaluate

    env = validation.seed_drawn("workload_router", ["rate_1.5x"], 24)["rate_1.5x"]
    base = "least_work_left"
    ms, plan, allowed = rollout_headroom.play(env, base, 1000, [])
    assert ms == evaluate(env, [base], seeds=[1000], jobs=1)[0]["mean_e2el_ms"]  # the base's own episode
    assert len(plan) > 10 and allowed[3] == [0, 1, 2, 3] and len(allowed) == len(plan)
    out = rollout_headroom.rollout(env, base, 1000)
    assert out["base_ms"] == ms and len(out["choices"]) == out["decisions"]
    assert out["changed"] > 0 and out["rollout_ms"] < ms  # (here it finds a better episode than its base's)
    assert rollout_headroom.play(env, base, 1000, out["choices"])[0] == out["rollout_ms"]  # that episode, replayed
    ps = rollout_headroom.placements(env, base, 1000, out["choices"])
    assert len(ps) == out["decisions"] and sum(p["changed"] for p in ps) == out["changed"]
    assert all(p["least"] <= min(p["load"], p["base_load"]) for p in ps)
    sparse = rollout_headroom.rollout(env, base, 1000, every=3)  # only decisions 0, 3, 6, ... are tried
    changed_at = [p["k"] for p in rollout_headroom.placements(env, base, 1000, sparse["choices"]) if p["changed"]]
    assert changed_at and all(k % 3 == 0 for k in changed_at) and sparse["rollout_ms"] <= ms
    assert rollout_headroom.play(env, base, 1000, sparse["choices"])[0] == sparse["rollout_ms"]
    assert "validation seeds only" in usage_error(rollout_headroom.main, ["--seeds", "2000"], capsys)
    for bad in (["--every", "0"], ["--sensitivity", "-1"]):
        assert "expected >= 1 / >= 0" in usage_error(rollout_headroom.main, bad, capsys)
    sens = rollout_headroom.sensitivity(env, base, 1000, points=4)
    assert sens["base_ms"] == ms and sens["n"] == len(sens["shifts"]) > 4
    assert len({x["k"] for x in sens["shifts"]}) == 4 and all(x["instance"] != plan[x["k"]] for x in sens["shifts"])
    one = sens["shifts"][-1]  # a shift is that one decision changed, the base before and after it
    moved = rollout_headroom.play(env, base, 1000, [*plan[:one["k"]], one["instance"]])[0]
    assert one["pct"] == 100.0 * (moved / ms - 1.0) and sens["share_better"] == sum(x["pct"] < 0 for x in
                                                                                     sens["shifts"]) / sens["n"]


@pytest.mark.timeout(240)
def test_the_past_only_rollout_sees_only_sampled_futures(capsys: pytest.CaptureFixture[str]) -> None:
    import copy

    import numpy as np

    from experiments.studies import past_only_rollout as por
    from llmsim.request import Request
    from tests.experiments.helpers import mid_episode

    cfg = validation.seed_drawn("workload_router", ["rate_1.5x"], 24)["rate_1.5x"]
    env, router, a = mid_episode(cfg, 1000, 8)
    k, now = env.cluster.num_arrived, env.driver.now
    truth = env.episode_requests[k:]
    future = por.sampled_future(env, 7)
    assert len(future) == len(truth) > 0 and all(r.arrival >= now for r in future)
    assert [r.output_tokens for r in future] != [r.output_tokens for r in truth]  # not the episode's own future
    assert np.all(np.diff([r.arrival for r in future]) >= 0)
    # replacing the future by a copy of the true one changes nothing; a sampled one keeps every request counted
    same = [Request(r.id, r.arrival, r.prompt_tokens, r.output_tokens, task=r.task) for r in truth]
    e1, r1 = copy.deepcopy((env, router))
    e2, r2 = copy.deepcopy((env, router))
    e2.replace_upcoming(same)
    assert por.finish(e1, r1, a) == por.finish(e2, r2, a)
    e3, r3 = copy.deepcopy((env, router))
    e3.replace_upcoming(future)
    por.finish(e3, r3, a)
    assert len(e3.episode_requests) == 24 and e3.episode_requests[k:] == future
    assert [r.id for r in future] == [r.id for r in truth] and e3.request(future[0].id) is future[0]
    with pytest.raises(ValueError, match="expected .* requests still to arrive"):
        copy.deepcopy(env).replace_upcoming(future[:-1])
    mask = env.action_masks()[: env.n_choices]
    allowed = [int(i) for i in np.flatnonzero(mask)]
    c, cost = por.choose(env, router, allowed, a, 2, 8)
    assert sorted(cost) == allowed and cost[c] == min(cost.values())
    assert env.cluster.num_arrived == k and env.episode_requests[k:] == truth  # the original env is untouched
    out = por.past_only_rollout(cfg, "least_work_left", 1000, samples=1, every=4)
    assert out["decisions"] > 10 and out["changed"] <= -(-out["decisions"] // 4)
    for bad in (["--every", "0"], ["--samples", "0"], ["--horizon", "0"]):
        assert "expected >= 1" in usage_error(por.main, bad, capsys)
    assert "validation seeds only" in usage_error(por.main, ["--seeds", "2000"], capsys)


def test_load_gate_metric_is_one_the_env_measures(capsys) -> None:
    """An unknown --metric ran the whole first scenario and then ended in a KeyError; one the env does not measure
    (utility on QoSEdge) in a TypeError on None."""
    prog = "python -m experiments.studies.load_gate: error: "
    assert usage_error(load_gate.main, ["--metric", "nope"], capsys).startswith(
        prog + "argument --metric: invalid choice: 'nope' (choose from 'avg_qos', ")
    argv = ["--metric", "utility", "--requests", "10", "--seeds", "1000", "--below", "2"]
    assert usage_error(load_gate.main, argv, capsys) == (
        prog + "--metric utility: qos_lookahead scored [None] on this env; a gain needs a measured, non-zero "
        "reference; choose a metric the env measures (see --help)")


@pytest.mark.parametrize("study", (guide_choice, spill_load), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_checkpoints_are_name_path_pairs(study, capsys) -> None:
    """A bare name was a ValueError traceback (guide_choice); a label given twice silently dropped one."""
    prog = f"python -m {study.__name__}: error: argument --checkpoints: "
    assert usage_error(study.main, ["--checkpoints", "oops"], capsys) == (
        prog + "expected NAME=PATH (a label, '=', a checkpoint directory), got 'oops'")
    assert usage_error(study.main, ["--checkpoints", "a=X", "a=Y"], capsys) == (
        prog + "label(s) ['a'] given twice; give each checkpoint its own NAME")


def test_load_gate_gains_are_positive_when_better_whichever_way_the_metric_points(monkeypatch) -> None:
    """With a latency (docs/agents.md runs --metric mean_e2el_ms) a slower candidate used to score a positive gain,
    and the choice took the worst."""
    rows = [{"policy": "jsq", "seed": 1000, "mean_e2el_ms": 100.0, "avg_qos": 0.5},
            {"policy": "network", "seed": 1000, "mean_e2el_ms": 80.0, "avg_qos": 0.6}]
    monkeypatch.setattr(load_gate, "evaluate", lambda *a, **k: rows)
    assert load_gate.gains({}, "ckpt", "jsq", [], [1000], 1, "mean_e2el_ms") == {"network": pytest.approx(20.0)}
    assert load_gate.gains({}, "ckpt", "jsq", [], [1000], 1, "avg_qos") == {"network": pytest.approx(20.0)}


def test_qlm_r2_options_without_r2_are_said(capsys) -> None:
    """``--model nope`` without ``--r2`` printed the help and exit 0: the options were ignored without a word."""
    assert usage_error(qlm_r2.main, ["--model", "nope"], capsys) == (
        "python -m experiments.studies.qlm_r2: error: --model nope: these options set up the R^2 experiment; add "
        "--r2 to run it")
    assert qlm_r2.main([]) == 0 and "usage:" in capsys.readouterr().out  # no option: the help, as before


def test_rollout_distill_checkpoints_must_hold_margin_checkpoints(tmp_path: Path, capsys) -> None:
    """A missing or empty --checkpoints folder evaluated the heuristics alone, with no word; margin_x a traceback."""
    prog = "python -m experiments.studies.rollout_distill: error: --checkpoints "
    missing = tmp_path / "nope"
    assert usage_error(rollout_distill.main, ["--checkpoints", str(missing)], capsys) == (
        f"{prog}{missing}: no such directory (expected rollout_distill's --out, holding margin_<m> checkpoints)")
    assert usage_error(rollout_distill.main, ["--checkpoints", str(tmp_path)], capsys) == (
        f"{prog}{tmp_path}: no margin_<m> checkpoint in it (rollout_distill's --out holds them after a fit)")
    (tmp_path / "margin_x").mkdir()
    assert usage_error(rollout_distill.main, ["--checkpoints", str(tmp_path)], capsys) == (
        f"{prog}{tmp_path}: margin_x: expected margin_<number>")


@pytest.mark.parametrize(("study", "option"), [(guide_choice, "--heuristics"), (load_gate, "--router")],
                         ids=["guide_choice", "load_gate"])
def test_a_heuristic_s_name_is_checked_under_its_option(study, option, capsys) -> None:
    """An unknown name was told as ``policy.name`` (the simulator CLI's key), after the scenarios were built."""
    assert usage_error(study.main, [option, "least_kb"], capsys).startswith(
        f"python -m {study.__name__}: error: argument {option}: unknown routing policy 'least_kb'; expected one of ")


HELPER_MODULES = sorted(
    ".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "experiments" / "studies").rglob("*.py")
    if p.name != "__init__.py" and "def main(" not in p.read_text())


@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import of package:RuntimeWarning")
@pytest.mark.parametrize("module", HELPER_MODULES)
def test_a_module_that_is_not_a_study_says_so_when_run(module: str) -> None:
    """``python -m experiments.studies.validation`` (the studies' shared helpers) did nothing and exited 0, as did
    the prefix and disagg studies' parts: each now exits non-zero with one line naming what to run instead."""
    assert "experiments.studies.validation" in HELPER_MODULES
    with pytest.raises(SystemExit) as e:
        runpy.run_module(module, run_name="__main__")
    message = str(e.value.code)
    assert e.value.code not in (0, None) and "\n" not in message
    assert message.startswith(f"python -m {module}: ") and "not a study" in message and "run " in message
