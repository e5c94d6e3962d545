"""The QoS-aware edge router's score and length bucket predictors (envs/predictors/qos.py) and the predictor
ablations (zero, ablate)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("xgboost")

from llmsim.envs.policy_router import noiseless, predictor_spec  # noqa: E402
from llmsim.envs.predictors.base import (  # noqa: E402
    PREDICTORS,
    AblatedPredictor,
    NoisyOraclePredictor,
    ZeroPredictor,
    make_predictor,
)
from llmsim.envs.predictors.from_config import make_agent_predictor  # noqa: E402
from llmsim.envs.predictors.qos import (  # noqa: E402
    GRID_MAX,
    QoSBucketModel,
    QoSBucketPredictor,
    bucket_index,
    collect_pairs,
    main,
    midpoints,
    split_requests,
    train_qos_predictor,
)
from llmsim.envs.tasks import qos_edge_mixture  # noqa: E402
from llmsim.envs.testbeds import QOS_EDGE_PREDICTOR, make_from_config  # noqa: E402
from llmsim.envs.workloads import MixtureWorkload  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402

EXPERTS = ["alpaca-native", "mpt-7b-instruct", "baize-7b"]


@pytest.fixture(scope="module")
def fitted() -> tuple[QoSBucketModel, dict]:
    return train_qos_predictor(EXPERTS, samples=1500, seed=3)


def test_buckets() -> None:
    assert bucket_index([0, 1, 29, 30, 59, 60, 269, 270, 299, 300, 1000], 300.0).tolist() == \
        [0, 0, 0, 1, 1, 2, 8, 9, 9, 9, 9]
    assert bucket_index([0.0, 0.099, 0.1, 0.65, 0.7, 0.95, 1.0], 1.0).tolist() == [0, 0, 1, 6, 7, 9, 9]
    assert midpoints(300.0)[[0, 9]].tolist() == [15.0, 285.0]
    assert np.allclose(midpoints(1.0)[[0, 6]], [0.05, 0.65])


def test_pairs_and_split() -> None:
    df = collect_pairs(EXPERTS, 50, seed=0)
    assert len(df) == 150 and set(df["expert"]) == set(EXPERTS)
    assert df["output_tokens"].between(1, 300).all() and df["quality"].between(0, 1).all()
    train, test = split_requests(df, seed=0)
    assert not set(train["request"]) & set(test["request"]) and len(test) == 30  # 10 of 50 requests x 3


def test_accuracy_beats_majority(fitted) -> None:
    model, r = fitted
    assert model.features == ["prompt_tokens"] + [f"expert={m}" for m in EXPERTS]  # one task: no task feature
    for t, v in r["targets"].items():
        assert v["model_top3"] >= v["model_top1"], t
        assert v["paper_top1"] is not None and v["oracle_top1"] == 1.0
        # nothing in a request beyond the expert carries signal, so the model cannot beat the ceiling by much
        assert v["model_top1"] <= v["ceiling_top1"] + 0.05, t
    lens = r["targets"]["output_tokens"]
    # lengths depend on the expert (mpt-7b-instruct: longer, narrower), so the expert feature beats one global bucket
    assert lens["model_top1"] > lens["majority_global_top1"] + 0.02
    assert lens["model_top3"] > lens["majority_global_top3"] + 0.02
    assert lens["model_top1"] >= lens["majority_expert_top1"] - 0.02


def test_ceiling_matches_a_large_sample() -> None:
    """The analytic ceiling equals the per-expert bucket frequencies of a large sample (the Bayes rule here)."""
    model, r = train_qos_predictor(EXPERTS, samples=4000, seed=5)
    for t, v in r["targets"].items():
        assert v["ceiling_top1"] == pytest.approx(v["majority_expert_top1"], abs=0.03), t
        assert v["ceiling_shared_top1"] >= v["ceiling_top1"], t


def test_save_load_round_trip(fitted, tmp_path: Path) -> None:
    model, _ = fitted
    files = model.save(tmp_path)
    assert files[0] == tmp_path / "qos_predictor.json" and all(f.is_file() for f in files)
    meta = json.loads(files[0].read_text())
    assert meta["experts"] == EXPERTS and meta["features"] == model.features
    assert meta["targets"]["output_tokens"]["edges"][:3] == [0.0, 30.0, 60.0]
    assert len(meta["targets"]["quality"]["model_sha256"]) == 64
    back = QoSBucketModel.load(files[0])
    a, b = QoSBucketPredictor(model), QoSBucketPredictor(files[0])
    reqs = MixtureWorkload(qos_edge_mixture(EXPERTS)).requests(9, 200)
    for req in reqs:
        for x, y in zip(a.predict(req, EXPERTS), b.predict(req, EXPERTS)):
            assert np.array_equal(x, y)
    df = collect_pairs(EXPERTS, 40, seed=1)
    for t in ("quality", "output_tokens"):
        assert np.array_equal(model.proba_frame(t, df), back.proba_frame(t, df))
    # a model file changed after saving is refused
    mp = tmp_path / meta["targets"]["quality"]["model_file"]
    mp.write_bytes(mp.read_bytes() + b" ")
    with pytest.raises(ConfigError, match="sha256 differs"):
        QoSBucketModel.load(files[0])


def test_other_experts_refused(fitted, tmp_path: Path) -> None:
    model, _ = fitted
    path = model.save(tmp_path / "p.json")[0]
    other = ["alpaca-native", "koala-7b"]
    with pytest.raises(ConfigError) as e:
        QoSBucketModel.load(path, experts=other)
    msg = str(e.value)
    assert str(path) in msg and str(EXPERTS) in msg and str(other) in msg and "\n" not in msg
    pred = QoSBucketPredictor(path)
    req = MixtureWorkload(qos_edge_mixture(other)).requests(0, 1)[0]
    with pytest.raises(ConfigError, match="trained for experts") as e:
        pred.predict(req, other)
    assert str(path) in str(e.value) and str(other) in str(e.value)
    assert len(pred.predict(req, list(reversed(EXPERTS)))[0]) == 3  # the same experts in another order are fine


def test_predictor_outputs_are_midpoints(fitted) -> None:
    model, _ = fitted
    pred = QoSBucketPredictor(model)
    reqs = MixtureWorkload(qos_edge_mixture(EXPERTS)).requests(2, 100)
    for req in reqs:
        lens, quals = pred.predict(req, EXPERTS)
        assert set(lens.tolist()) <= set(midpoints(300.0).tolist())
        assert np.allclose(quals * 20 % 2, 1.0)  # 0.05, 0.15, ...
    big = reqs[0]
    big.prompt_tokens = GRID_MAX + 100  # off the grid: one model call
    assert pred.predict(big, EXPERTS)[0].shape == (3,)


def test_make_agent_predictor_plugs_into_qos_edge(fitted, tmp_path: Path) -> None:
    path = fitted[0].save(tmp_path)[0]
    loaded = make_agent_predictor({"kind": "learned_qos", "path": str(path)})
    trained = make_agent_predictor({"kind": "learned_qos", "samples": 300, "seed": 1, "experts": EXPERTS})
    assert isinstance(loaded, QoSBucketPredictor) and isinstance(trained, QoSBucketPredictor)
    assert make_agent_predictor({"kind": "learned", "samples": 100}).__class__.__name__ == "LearnedPredictor"
    with pytest.raises(ConfigError, match="unknown key"):
        make_agent_predictor({"kind": "learned_qos", "sample": 10})
    with pytest.raises(ConfigError, match="drop the training key"):
        make_agent_predictor({"kind": "learned_qos", "path": str(path), "seed": 1})
    with pytest.raises(ConfigError, match="trained for experts"):
        make_agent_predictor({"kind": "learned_qos", "path": str(path), "experts": ["koala-7b"]})
    for pred in (loaded, trained):
        env = make_from_config({"id": "qos_edge", "num_requests": 50, "experts": EXPERTS, "predictor": pred})
        obs, _ = env.reset(seed=0)
        n = len(EXPERTS)
        lens, quals = pred.predict(env.pending, env.models)
        assert np.allclose(obs["arrived"][0, n:2 * n], quals) and np.allclose(obs["arrived"][0, 2 * n:], lens / 300)
        done, steps = False, 0
        while not done:
            obs, _, term, trunc, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
            done, steps = term or trunc, steps + 1
        assert term and steps >= 40


def test_zero_predictor_zeroes_graph_features() -> None:
    assert PREDICTORS.get("zero") is ZeroPredictor and isinstance(make_predictor("zero"), ZeroPredictor)
    assert make_agent_predictor("zero") == "zero"
    env = make_from_config({"id": "qos_edge", "num_requests": 200, "rate": 40.0, "experts": EXPERTS,
                            "predictor": "zero"})
    obs, _ = env.reset(seed=1)
    n = len(EXPERTS)
    rng = np.random.default_rng(0)
    seen_running = 0
    for _ in range(120):
        assert obs["arrived_mask"][0] == 0 or obs["arrived"][0, 0] > 0  # the prompt feature is still there
        assert not obs["arrived"][0, n:].any()
        for kind in ("running", "waiting"):
            real = obs[f"{kind}_mask"] > 0
            assert not obs[kind][real][:, 1:3].any()  # predicted quality and length
        seen_running += int(obs["running_mask"].sum())
        obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
        if term or trunc:
            break
    assert seen_running > 0


def graph_run(predictor, steps: int = 120, seed: int = 1) -> list[dict]:
    """The observations of a QoSEdge episode under ``predictor``, with actions drawn from a fixed generator (the
    simulation does not read predictions, so every predictor sees the same states)."""
    env = make_from_config({"id": "qos_edge", "num_requests": 200, "rate": 40.0, "experts": EXPERTS,
                            "predictor": predictor})
    obs, _ = env.reset(seed=seed)
    rng, out = np.random.default_rng(0), [obs]
    for _ in range(steps):
        obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
        out.append(obs)
        if term or trunc:
            break
    return out


@pytest.mark.parametrize("zero", [["score"], ["length"], ["score", "length"]])
def test_partial_ablations_zero_one_feature(zero: list[str]) -> None:
    """ZS+PL zeroes the predicted quality and keeps the base predictor's lengths, PS+ZL the reverse."""
    base = graph_run(dict(QOS_EDGE_PREDICTOR))
    ablated = graph_run({"kind": "ablate", "base": dict(QOS_EDGE_PREDICTOR), "zero": zero})
    n = len(EXPERTS)
    assert len(base) == len(ablated) > 50
    seen = {"score": 0, "length": 0}
    for b, a in zip(base, ablated):
        cols = {"score": (slice(n, 2 * n), 1), "length": (slice(2 * n, 3 * n), 2)}
        for what, (arrived, slot) in cols.items():
            if what in zero:
                assert not a["arrived"][0, arrived].any()
            else:
                assert np.array_equal(a["arrived"][0, arrived], b["arrived"][0, arrived])
                seen[what] += int(b["arrived"][0, arrived].any())
            for kind in ("running", "waiting"):
                assert np.array_equal(a[f"{kind}_mask"], b[f"{kind}_mask"])
                real = b[f"{kind}_mask"] > 0
                if what in zero:
                    assert not a[kind][real][:, slot].any()
                else:
                    assert np.array_equal(a[kind][:, slot], b[kind][:, slot])
        assert np.array_equal(a["arrived"][0, :n], b["arrived"][0, :n])  # the prompt feature is untouched
    assert all(seen[w] > 0 for w in seen if w not in zero)  # the kept feature was not trivially 0


def test_ablation_is_deterministic_and_exports() -> None:
    spec = {"kind": "ablate", "base": dict(QOS_EDGE_PREDICTOR), "zero": ["length"]}
    runs = [graph_run(spec, steps=60, seed=4) for _ in range(2)]
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(*runs) for k in a)
    pred = make_predictor(spec)
    assert isinstance(pred, AblatedPredictor) and PREDICTORS.get("ablate") is AblatedPredictor
    assert make_agent_predictor(spec) == {**spec, "base": dict(QOS_EDGE_PREDICTOR)}  # passes through to the env
    out = predictor_spec(pred)
    assert out == {"kind": "ablate", "zero": ["length"], "base": {**QOS_EDGE_PREDICTOR, "q_max": 1.0}}
    back = make_predictor(out, seed=7)
    pred.reset(7)
    reqs = MixtureWorkload(qos_edge_mixture(EXPERTS)).requests(3, 30)
    for req in reqs:
        for x, y in zip(pred.predict(req, EXPERTS), back.predict(req, EXPERTS)):
            assert np.array_equal(x, y)
    quiet = noiseless(pred)  # an export run without the simulated error keeps the ablation and the buckets
    assert isinstance(quiet, AblatedPredictor) and quiet.zero == ("length",)
    assert isinstance(quiet.base, NoisyOraclePredictor) and quiet.base.len_sigma == 0 and quiet.base.len_buckets


def test_ablation_of_a_learned_predictor(fitted, tmp_path: Path) -> None:
    path = fitted[0].save(tmp_path)[0]
    pred = make_agent_predictor({"kind": "ablate", "base": {"kind": "learned_qos", "path": str(path)},
                                 "zero": ["score"]})
    assert isinstance(pred, AblatedPredictor) and isinstance(pred.base, QoSBucketPredictor)
    req = MixtureWorkload(qos_edge_mixture(EXPERTS)).requests(0, 1)[0]
    lens, quals = pred.predict(req, EXPERTS)
    assert not quals.any() and np.array_equal(lens, pred.base.predict(req, EXPERTS)[0])
    with pytest.raises(ConfigError) as e:
        predictor_spec(pred)
    assert str(e.value).startswith("env.predictor.base: a QoSBucketPredictor cannot be exported")
    with pytest.raises(ConfigError, match=r"^predictor.base: 'learned_qos' is a learned predictor, which the env"):
        make_from_config({"id": "qos_edge", "experts": EXPERTS,
                          "predictor": {"kind": "ablate", "base": {"kind": "learned_qos", "path": str(path)},
                                        "zero": ["score"]}})


FITTED_BY = ("llmsim.envs.predictors.from_config.make_agent_predictor, which fits it first, as llmsim-train does, "
             "and pass its result as the env's predictor")


@pytest.mark.parametrize(("spec", "line"), [
    ({"kind": "ablate", "base": {"kind": "learned_qos", "path": "p.json"}, "zero": ["score"]},
     "predictor.base: 'learned_qos' is a learned predictor, which the env does not fit (its own: noisy, oracle, "
     "zero); give the whole ablate spec to " + FITTED_BY),
    ({"kind": "ablate", "base": "learned", "zero": ["length"]},
     "predictor.base: 'learned' is a learned predictor, which the env does not fit (its own: noisy, oracle, zero); "
     "give the whole ablate spec to " + FITTED_BY),
    ("learned", "predictor: 'learned' is a learned predictor, which the env does not fit (its own: ablate, noisy, "
                "oracle, zero); give it to " + FITTED_BY),
    ("nosuch", "predictor: unknown predictor 'nosuch'; expected one of ['ablate', 'noisy', 'oracle', 'zero'], or "
               "learned or learned_qos through " + FITTED_BY),
    ({"kind": "ablate", "base": "nosuch", "zero": ["score"]},
     "predictor.base: unknown predictor 'nosuch'; expected one of ['ablate', 'noisy', 'oracle', 'zero'], or "
     "learned or learned_qos through " + FITTED_BY),
])
def test_the_env_says_which_predictors_it_builds_and_where_learned_ones_are_fitted(spec, line: str) -> None:
    """The env builds oracle, noisy, zero and ablate; learned ones (alone or as an ablate base) are fitted by
    make_agent_predictor, which llmsim-train calls: the env's refusal says so rather than listing a partial set."""
    with pytest.raises(ConfigError) as e:
        make_predictor(spec)
    assert str(e.value) == line


@pytest.mark.parametrize(("name", "zero"), [("qos_edge_zs_pl", ["score"]), ("qos_edge_ps_zl", ["length"])])
def test_ablation_experiments_ablate_the_env_predictor(name: str, zero: list[str]) -> None:
    """The experiment presets' base is the QoSEdge env's own predictor, so they differ from the main method only by
    the zeroed feature."""
    yaml = pytest.importorskip("yaml")
    conf = Path(__file__).resolve().parents[2] / "conf" / "experiment" / f"{name}.yaml"
    pred = yaml.safe_load(conf.read_text())["predictor"]
    assert pred == {"kind": "ablate", "base": QOS_EDGE_PREDICTOR, "zero": zero}


@pytest.mark.parametrize(("spec", "start"), [
    ({"kind": "ablate", "base": "noisy", "zero": ["scores"]}, "predictor.zero: expected a non-empty list"),
    ({"kind": "ablate", "base": "noisy", "zero": []}, "predictor.zero: expected a non-empty list"),
    ({"kind": "ablate", "base": "noisy", "zero": ["score", "score"]}, "predictor.zero: expected"),
    ({"kind": "ablate", "base": "noisy"}, "predictor.zero: expected"),
    ({"kind": "ablate", "zero": ["score"]}, "predictor.base: the ablate predictor needs"),
    ({"kind": "ablate", "base": "nosy", "zero": ["score"]}, "predictor.base: unknown predictor 'nosy'"),
    ({"kind": "ablate", "base": {"kind": "noisy", "q_sd": -1}, "zero": ["score"]},
     "predictor.base.q_sd: expected a number >= 0"),
    ({"kind": "ablate", "base": {"kind": "ablate", "base": "oracle", "zero": ["score"]}, "zero": ["length"]},
     "predictor.base: an ablate predictor cannot wrap another"),
])
def test_bad_ablation_specs(spec: dict, start: str) -> None:
    for build in (make_predictor, lambda s: make_from_config({"id": "qos_edge", "experts": EXPERTS, "predictor": s})):
        with pytest.raises(ConfigError) as e:
            build(spec)
        assert str(e.value).startswith(start) and "\n" not in str(e.value)
    if "q_sd" not in start:  # make_agent_predictor leaves a base the env builds to the env
        with pytest.raises(ConfigError) as e:
            make_agent_predictor(spec)
        assert str(e.value).startswith(start) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['zeros'\] for kind 'ablate'"):
        make_agent_predictor({"kind": "ablate", "base": "oracle", "zeros": ["score"]})


def test_cli(tmp_path: Path, capsys) -> None:
    assert main(["--samples", "300", "--seed", "2", "--experts", ",".join(EXPERTS), "--out", str(tmp_path),
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["experts"] == EXPERTS and r["predict_us"] > 0 and (tmp_path / "qos_predictor.json").is_file()
    assert set(r["targets"]) == {"quality", "output_tokens"}
    assert main(["--samples", "300", "--experts", ",".join(EXPERTS)]) == 0
    out = capsys.readouterr().out
    assert "paper" in out and "72.97" in out and "63.39" in out
    assert main(["--samples", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: samples:") and err.count("\n") == 1
    assert main(["--samples", "300", "--experts", "a,a"]) == 2
    assert "distinct" in capsys.readouterr().err
