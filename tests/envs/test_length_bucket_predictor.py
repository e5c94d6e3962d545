"""The learned output-length bucket predictor (envs/predictors/length_buckets.py; "Intelligent Router
for LLM Workloads", Sec. 4.1)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from llmsim.envs.predictors.from_config import make_agent_predictor  # noqa: E402
from llmsim.envs.predictors.length_buckets import (  # noqa: E402
    BUCKET_NAMES,
    GRID_MAX,
    BucketPredictor,
    LearnedPredictor,
    bucket_lengths,
    bucket_of,
    collect_samples,
    main,
    split,
    train_predictor,
)
from llmsim.envs.tasks import TaskMixture, TaskSpec  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.request import Request  # noqa: E402


def synthetic_mix() -> TaskMixture:
    """Three tasks whose lengths sit in different buckets (the task is informative), one of them weakly so."""
    m = "llama-2-7b"
    tasks = [TaskSpec("short", 40.0, 0.5, 1000, {m: 60.0}, {m: 0.4}, 4095),
             TaskSpec("medium", 300.0, 0.5, 1000, {m: 500.0}, {m: 0.3}, 4095),
             TaskSpec("long", 100.0, 0.5, 1000, {m: 2000.0}, {m: 0.3}, 4095)]
    return TaskMixture(tasks, [m], [0.5, 0.3, 0.2], max_total=8192)


@pytest.fixture(scope="module")
def fitted() -> tuple[BucketPredictor, dict]:
    pytest.importorskip("xgboost")
    return train_predictor(synthetic_mix(), 2000, seed=3, model="xgboost")


def test_bucket_edges() -> None:
    tokens = [0, 1, 249, 250, 251, 999, 1000, 1001, 3999, 4000, 4096, 10**6]
    assert bucket_of(tokens).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert int(bucket_of(250)) == 1 and len(BUCKET_NAMES) == 3


def test_bucket_lengths_rules() -> None:
    out = np.array([10, 20, 30, 300, 500])
    b = bucket_of(out)
    assert bucket_lengths(out, b, "median") == [20.0, 400.0, 2500.0]  # empty bucket 2 -> its midpoint
    assert bucket_lengths(out, b, "midpoint") == [125.0, 625.0, 2500.0]
    assert bucket_lengths(out, b, "upper") == [250.0, 1000.0, 4000.0]
    with pytest.raises(ConfigError, match="unknown rule"):
        bucket_lengths(out, b, "mean")


def test_samples_have_no_label_leak() -> None:
    df = collect_samples(synthetic_mix(), 200, seed=1)
    assert list(df.columns) == ["task", "prompt_tokens", "output_tokens", "bucket"]
    assert (df["bucket"].to_numpy() == bucket_of(df["output_tokens"])).all()
    train, test = split(df, 1)
    assert (len(train), len(test)) == (160, 40)


@pytest.mark.parametrize("model", ["xgboost", "sklearn"])
def test_accuracy_beats_majority(model: str) -> None:
    pytest.importorskip("xgboost" if model == "xgboost" else "sklearn")
    _, r = train_predictor(synthetic_mix(), 2000, seed=0, model=model)
    assert r["majority_baseline"] < 0.6
    assert r["accuracy"] > r["majority_baseline"] + 0.3
    assert r["accuracy"] >= r["task_majority_baseline"] - 0.02
    assert {row["task"] for row in r["per_task"]} == {"short", "medium", "long"}


def test_determinism(fitted) -> None:
    bp2, r2 = train_predictor(synthetic_mix(), 2000, seed=3, model="xgboost")
    bp, r = fitted
    assert r["accuracy"] == r2["accuracy"] and r["per_task"] == r2["per_task"]
    df = collect_samples(synthetic_mix(), 300, seed=9)
    assert (bp.predict_frame(df) == bp2.predict_frame(df)).all()


@pytest.mark.parametrize("model", ["xgboost", "constant"])
def test_save_load_round_trip(model: str, tmp_path: Path) -> None:
    pytest.importorskip("xgboost")
    if model == "constant":  # every output in one bucket: no classifier is fitted
        m = "x"
        mix = TaskMixture([TaskSpec("a", 50.0, 0.5, 500, {m: 40.0}, {m: 0.1}, 200)], [m])
        bp, _ = train_predictor(mix, 200, seed=0)
    else:
        bp, _ = train_predictor(synthetic_mix(), 1000, seed=1, model=model)
    assert bp.kind == model
    files = bp.save(tmp_path / "p.json")
    back = BucketPredictor.load(files[0])
    df = collect_samples(synthetic_mix(), 500, seed=5)
    assert (back.predict_frame(df) == bp.predict_frame(df)).all()
    assert back.lengths == bp.lengths and back.tasks == bp.tasks and back.classes == bp.classes


def test_a_sklearn_predictor_works_in_memory_and_is_not_saved(tmp_path: Path) -> None:
    """scikit-learn saves only by pickle, which llmsim never loads: the fitted model predicts, saving names xgboost."""
    pytest.importorskip("sklearn")
    bp, _ = train_predictor(synthetic_mix(), 1000, seed=1, model="sklearn")
    assert bp.kind == "sklearn" and len(bp.predict_frame(collect_samples(synthetic_mix(), 50, seed=5))) == 50
    with pytest.raises(ConfigError, match="not saved .*never loads.*use model xgboost"):
        bp.save(tmp_path / "p.json")
    assert list(tmp_path.iterdir()) == []
    assert main(["--samples", "600", "--model", "sklearn", "--out", str(tmp_path / "s.json")]) == 2
    assert list(tmp_path.iterdir()) == []


def _one_line_error(path: Path, match: str) -> None:
    with pytest.raises(ConfigError) as e:
        BucketPredictor.load(path)
    msg = str(e.value)
    assert "\n" not in msg and match in msg, msg


def test_bad_files_are_refused(fitted, tmp_path: Path) -> None:
    bp, _ = fitted
    _one_line_error(tmp_path / "missing.json", f"{tmp_path / 'missing.json'}: no such predictor file")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _one_line_error(bad, f"{bad}: not a predictor file: expected JSON")
    bad.write_text(json.dumps({"format": "something-else"}))
    _one_line_error(bad, f"{bad}: not a valid llmsim-length-bucket-predictor file: expected format")
    meta_p, model_p = bp.save(tmp_path / "p.json")
    meta = json.loads(meta_p.read_text())
    bad.write_text(json.dumps({**meta, "lengths": [1, 2]}))
    _one_line_error(bad, "lengths")
    bad.write_text(json.dumps({**meta, "features": ["prompt_tokens"]}))
    _one_line_error(bad, "expected features")
    model_p.write_bytes(model_p.read_bytes()[:100])  # truncated model file: the checksum catches it
    _one_line_error(meta_p, f"{model_p}: does not match {meta_p}")
    meta["model_sha256"] = hashlib.sha256(model_p.read_bytes()).hexdigest()
    meta_p.write_text(json.dumps(meta))  # a consistent but unreadable model file
    _one_line_error(meta_p, f"{model_p}: not a readable xgboost model")
    model_p.unlink()
    _one_line_error(meta_p, f"{model_p}: missing model file")
    with pytest.raises(ConfigError, match=r"\.json"):
        bp.save(tmp_path / "p.ubj")


def test_learned_predictor_uses_task_and_prompt_only(fitted) -> None:
    bp, _ = fitted
    lp = LearnedPredictor(bp)
    a = Request(0, 0.0, 120, 5, task="long", quality_by_model={"m1": 0.7})
    b = Request(1, 0.0, 120, 3000, task="long")
    (la, qa), (lb, qb) = lp.predict(a, ["m1", "m2"]), lp.predict(b, ["m1", "m2"])
    assert la.tolist() == lb.tolist() and la[0] == la[1]  # the label never enters
    assert qa.tolist() == [0.7, 0.0] and qb.tolist() == [0.0, 0.0]  # the oracle's quality
    for task, p in [("short", 7), ("medium", 999), ("long", GRID_MAX), ("long", GRID_MAX + 50), ("other", 3)]:
        assert lp.length(task, p) == bp.predict_lengths([task], [p])[0]  # the grid is the model


def test_learned_predictor_runs_in_env(fitted) -> None:
    import gymnasium as gym

    import llmsim.envs  # noqa: F401  (registers the ids)

    lp = LearnedPredictor(fitted[0])
    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=50, predictor=lp)
    assert env.unwrapped.predictor is lp
    obs, info = env.reset(seed=0)
    done, steps = False, 0
    while not done:
        obs, r, term, trunc, info = env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
        done, steps = term or trunc, steps + 1
    assert steps > 0 and np.isfinite(r)
    reqs = env.unwrapped.episode_requests
    assert len(reqs) == 50
    routed = [q for q in reqs if q.predicted_output is not None]
    assert routed and all(q.predicted_output == lp.length(q.task, q.prompt_tokens) for q in routed)
    env.close()


def test_make_agent_predictor(fitted, tmp_path: Path, monkeypatch) -> None:
    assert make_agent_predictor("oracle") == "oracle"
    noisy = {"kind": "noisy", "len_sigma": 0.2}
    assert make_agent_predictor(noisy) == noisy
    assert make_agent_predictor(None) is None
    path = fitted[0].save(tmp_path / "p.json")[0]
    lp = make_agent_predictor({"kind": "learned", "path": str(path)})
    assert isinstance(lp, LearnedPredictor) and lp.bp.lengths == fitted[0].lengths
    wl = {"kind": "mixture", "preset": "qos_edge"}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = sorted(tmp_path.rglob("*"))
    lp2 = make_agent_predictor({"kind": "learned", "samples": 300, "seed": 1, "model": "xgboost", "workload": wl})
    assert isinstance(lp2, LearnedPredictor) and lp2.bp.tasks == ["mix-instruct"]
    assert sorted(tmp_path.rglob("*")) == before  # training on the fly wrote nothing
    with pytest.raises(ConfigError, match="unknown key"):
        make_agent_predictor({"kind": "learned", "sample": 10})
    with pytest.raises(ConfigError, match="drop the training key"):
        make_agent_predictor({"kind": "learned", "path": str(path), "samples": 10})
    with pytest.raises(ConfigError, match="unknown predictor 'orcale'"):
        make_agent_predictor("orcale")
    with pytest.raises(ConfigError, match="unknown classifier"):
        make_agent_predictor({"kind": "learned", "samples": 100, "model": "bert"})


def test_cli(tmp_path: Path, capsys) -> None:
    pytest.importorskip("xgboost")
    out = tmp_path / "cli.json"
    assert main(["--samples", "600", "--seed", "2", "--out", str(out), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["n_train"] == 480 and r["n_test"] == 120 and r["paper_accuracy"] == 0.7915
    assert {row["task"] for row in r["per_task"]} == {"translation", "qna", "sentiment", "in_context_qna",
                                                       "entity_recognition"}
    assert BucketPredictor.load(out).kind == "xgboost"
    assert main(["--samples", "600", "--seed", "2"]) == 0
    text = capsys.readouterr().out
    assert "overall" in text and "79.15" in text
    assert main(["--samples", "600", "--out", str(tmp_path / "x.txt")]) == 2


@pytest.mark.parametrize("model", ["xgboost", "sklearn"])
def test_prompt_length_is_a_feature(model: str) -> None:
    """Within one task the classifier uses the prompt length when it carries signal (the env mixtures draw
    prompt and output lengths independently given the task, so there it cannot; see docs/predictors.md)."""
    pytest.importorskip("xgboost" if model == "xgboost" else "sklearn")
    import pandas as pd

    p = np.random.default_rng(0).integers(1, 1000, 1500)
    out = np.where(p < 500, 100, 600)
    df = pd.DataFrame({"task": "t", "prompt_tokens": p, "output_tokens": out, "bucket": bucket_of(out)})
    train, test = split(df, 0)
    bp = BucketPredictor.fit(train, model, seed=0)
    assert (bp.predict_frame(test) == test["bucket"].to_numpy()).mean() > 0.97
