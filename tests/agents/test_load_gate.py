"""A learned router's light-load fallback (envs/load_gate.py): below ``below`` requests in flight per instance a
heuristic decides. Pinned here: a gate that is always light is exactly its heuristic, ``load_gate: none`` is exactly
the network, a gate in between mixes the two, checkpoint.json's gate is followed by evaluation and carried into the
export (heuristic options filled in for the live router), and a bad gate is one line naming where it is. Above
the load, a ``margin`` hands the decision to the heuristic wherever the network prefers its own action by less:
a huge margin is the heuristic, a middle one mixes, and the live router applies it as evaluation does; with
``margin_burst`` only on bunched arrivals, in evaluation and in the live router alike."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from llmsim.agents import zoo  # noqa: E402
from llmsim.agents.episodes import evaluate  # noqa: E402
from llmsim.agents.policy_specs import normalise_spec  # noqa: E402
from llmsim.envs.load_gate import LoadGate, in_flight_per_instance, unsure  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402

ENV = {"id": "qos_edge", "num_requests": 60, "rate": 5.0, "max_experts": 10}
ALWAYS = {"router": "qos_lookahead", "below": 1e9}  # every decision is the heuristic's
UNSURE = {"router": "qos_lookahead", "below": 1e-9, "margin": 1e9}  # never light, always unsure: the heuristic's
MARGIN = {"router": "qos_lookahead", "below": 1e-9, "margin": 2.0}
# never light; a margin that hands over every decision, while half of the recent decisions come bunched
BURST = {"router": "qos_lookahead", "below": 1e-9, "smooth_s": 30.0, "margin": 1e9, "margin_burst": 0.5}
KEYS = ("return", "avg_qos", "mean_e2el_ms", "dropped", "workload_digest")


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


@pytest.fixture
def gated_checkpoint(tmp_path: Path) -> Path:
    """The shipped QoSEdge router's checkpoint with an always-light gate in its checkpoint.json."""
    d = tmp_path / "ckpt"
    shutil.copytree(zoo.checkpoint_dir("zoo:qos_edge"), d)
    meta = json.loads((d / "checkpoint.json").read_text())
    (d / "checkpoint.json").write_text(json.dumps({**meta, "load_gate": ALWAYS}))
    return d


def results(policies: list, seed: int = 1000) -> dict[str, dict]:
    return {r["policy"]: {k: r[k] for k in KEYS} for r in evaluate(ENV, policies, seeds=[seed])}


def test_always_light_is_the_heuristic_and_none_is_the_network(gated_checkpoint: Path) -> None:
    out = results([{"checkpoint": str(gated_checkpoint), "label": "gated"},
                   {"checkpoint": str(gated_checkpoint), "label": "ungated", "load_gate": "none"},
                   {"checkpoint": "zoo:qos_edge", "label": "network", "load_gate": "none"}, "qos_lookahead"])
    assert out["gated"] == out["qos_lookahead"]
    assert out["ungated"] == out["network"]
    assert out["network"]["return"] != out["qos_lookahead"]["return"]  # else the first two prove nothing


def test_a_gate_in_between_mixes_the_two() -> None:
    out = results([{"checkpoint": "zoo:qos_edge", "label": "mixed",
                    "load_gate": {"router": "qos_lookahead", "below": 1.5}},
                   {"checkpoint": "zoo:qos_edge", "label": "network", "load_gate": "none"}, "qos_lookahead"],
                  seed=1001)
    assert out["mixed"]["return"] not in (out["network"]["return"], out["qos_lookahead"]["return"])


def test_an_unsure_network_takes_the_heuristics_action() -> None:
    out = results([{"checkpoint": "zoo:qos_edge", "label": "unsure", "load_gate": UNSURE},
                   {"checkpoint": "zoo:qos_edge", "label": "margin", "load_gate": MARGIN},
                   {"checkpoint": "zoo:qos_edge", "label": "network", "load_gate": "none"},
                   {"checkpoint": "zoo:qos_edge", "label": "no margin",
                    "load_gate": {**MARGIN, "margin": 0.0}}, "qos_lookahead"], seed=1001)
    assert out["unsure"] == out["qos_lookahead"]
    assert out["no margin"] == out["network"]  # a gate that is never light and has no margin changes nothing
    assert out["margin"]["return"] not in (out["network"]["return"], out["qos_lookahead"]["return"])


def test_unsure_is_the_score_gap_below_the_margin() -> None:
    scores = [-math.inf, 1.0, 3.0]
    assert unsure(scores, 2, 1, 2.5)
    assert not unsure(scores, 2, 1, 2.0)  # a gap of exactly the margin: the network keeps its choice
    assert not unsure(scores, 2, 0, 1e9)  # the heuristic's action is masked for the network
    assert not unsure(scores, 2, 2, 1e9)  # the same action: nothing to hand over
    assert not unsure(scores, 2, 1, 0.0)  # no margin: never


def test_the_margin_applies_below_margin_below_only() -> None:
    env = make_from_config(ENV)
    env.reset(seed=1000)
    idle = env.cluster.view.state()
    busy = idle._replace(instances=tuple(i._replace(num_running=4) for i in idle.instances))
    gate = LoadGate(router="jsq", below=1.0, margin=2.0, margin_below=3.0)
    meter = gate.meter()
    assert not meter.light(busy) and gate.margin_now(meter) == 0.0  # 4 in flight: the network alone
    meter = gate.meter()
    assert meter.light(idle) and gate.margin_now(meter) == 2.0
    assert LoadGate(router="jsq", below=1.0, margin=2.0).margin_now(meter) == 2.0  # no margin_below: any load


def test_in_flight_counts_running_waiting_swapped_and_the_central_queue() -> None:
    env = make_from_config(ENV)
    env.reset(seed=1000)
    state = env.cluster.view.state()
    insts = tuple(i._replace(num_running=4, num_waiting=2, num_swapped=1) for i in state.instances)
    busy = state._replace(instances=insts, central_queue=6)
    assert in_flight_per_instance(busy) == 7 + 6 / len(insts)
    assert len(insts) == 6  # 8 in flight per instance
    assert LoadGate(router="jsq", below=8.5).meter().light(busy)
    assert not LoadGate(router="jsq", below=8.0).meter().light(busy)


def test_the_smoothed_load_is_the_weighted_time_average_since_the_first_decision() -> None:
    env = make_from_config(ENV)
    env.reset(seed=1000)
    idle = env.cluster.view.state()._replace(now=0.0, central_queue=0)
    insts = tuple(i._replace(num_running=8) for i in idle.instances)
    meter = LoadGate(router="jsq", below=4.0, smooth_s=10.0).meter()
    assert meter.light(idle) and meter.level == 0.0
    assert meter.light(idle._replace(now=2.0, instances=insts))  # 0 held for 2 s: the average is still 0
    assert meter.level == 0.0
    assert not meter.light(idle._replace(now=12.0, instances=insts))  # then 8 held for 10 s
    w0, w1 = 10 * (1 - math.exp(-0.2)) * math.exp(-1), 10 * (1 - math.exp(-1))
    assert meter.level == pytest.approx(8 * w1 / (w0 + w1))  # 7.2: not 8 x (1 - e^-1.2) = 5.6, no start at 0
    assert LoadGate(router="jsq", below=4.0).meter().light(idle) is True  # unsmoothed: the load at the decision


@pytest.mark.parametrize("gate, key", [({"router": "no_such", "below": 2}, "load_gate.router"),
                                       ({"router": "jsq", "below": 0}, "load_gate.below"),
                                       ({"router": "jsq"}, "load_gate.below"),
                                       ({"router": "onnx", "below": 2}, "load_gate.router"),
                                       ({"router": "jsq", "below": 2, "margin": -1}, "load_gate.margin"),
                                       ({"router": "jsq", "below": 2, "at": 3}, "load_gate")])
def test_a_bad_gate_is_one_line_naming_the_key(gate: dict, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        LoadGate.parse(gate)
    assert str(e.value).startswith(key) and "\n" not in str(e.value)


def test_a_bad_gate_in_a_checkpoint_names_the_checkpoint(gated_checkpoint: Path) -> None:
    meta = json.loads((gated_checkpoint / "checkpoint.json").read_text())
    (gated_checkpoint / "checkpoint.json").write_text(json.dumps({**meta, "load_gate": {"router": "x", "below": 1}}))
    with pytest.raises(ConfigError, match=f"{gated_checkpoint}.*load_gate.router") as e:
        evaluate(ENV, [normalise_spec({"checkpoint": str(gated_checkpoint)})], seeds=[1000])
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_the_export_carries_the_gate_with_its_options_for_the_live_router(gated_checkpoint: Path,
                                                                          tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from llmsim.agents.export import export

    out = export(gated_checkpoint, out=tmp_path / "export", check_steps=16)
    gate = json.loads((out / "manifest.json").read_text())["load_gate"]
    assert gate["router"] == "qos_lookahead" and gate["below"] == 1e9
    assert len(gate["kwargs"]["models"]) == 6 and set(gate["kwargs"]) >= {"k1", "k2", "base", "latency_limit"}
    res = results([{"name": "onnx", "kwargs": {"path": str(out)}, "label": "live"}, "qos_lookahead"])
    assert res["live"] == res["qos_lookahead"]  # the exported router's heuristic decides every request


@pytest.mark.slow
def test_the_live_router_applies_the_margin(gated_checkpoint: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from llmsim.agents.export import export

    meta = json.loads((gated_checkpoint / "checkpoint.json").read_text())
    (gated_checkpoint / "checkpoint.json").write_text(json.dumps({**meta, "load_gate": UNSURE}))
    out = export(gated_checkpoint, out=tmp_path / "export", check_steps=16)
    assert json.loads((out / "manifest.json").read_text())["load_gate"]["margin"] == 1e9
    res = results([{"name": "onnx", "kwargs": {"path": str(out)}, "label": "live"}, "qos_lookahead",
                   {"checkpoint": "zoo:qos_edge", "label": "network", "load_gate": "none"}], seed=1001)
    assert res["live"] == res["qos_lookahead"]  # never light, always unsure: the heuristic's decision every time
    assert res["network"]["return"] != res["qos_lookahead"]["return"]  # else the first proves nothing


@pytest.mark.timeout(300)
def test_the_shipped_export_in_the_simulator_decides_as_its_checkpoint(tmp_path: Path) -> None:
    """The zoo's export (ONNX, observation rebuilt from ClusterState, its own noisy predictor seeded as the env's)
    against its checkpoint, with no gate, the shipped gate and a gate whose margin decides above the load."""
    pytest.importorskip("onnxruntime")
    export_dir = zoo.ZOO_DIR / "qos_edge" / "export"
    shipped = json.loads((export_dir / "manifest.json").read_text())["load_gate"]
    policies: list = []
    for label, gate in (("none", None), ("shipped", shipped), ("margin", {**shipped, "below": 1e-9, "margin": 2.0})):
        d = tmp_path / label
        shutil.copytree(export_dir, d)
        meta = json.loads((d / "manifest.json").read_text())
        meta.pop("load_gate")
        (d / "manifest.json").write_text(json.dumps(meta if gate is None else {**meta, "load_gate": gate}))
        policies += [{"name": "onnx", "kwargs": {"path": str(d)}, "label": f"live {label}"},
                     {"checkpoint": "zoo:qos_edge", "label": label,
                      "load_gate": "none" if gate is None else {k: v for k, v in gate.items() if k != "kwargs"}}]
    out = results(policies, seed=1001)
    for label in ("none", "shipped", "margin"):
        assert out[f"live {label}"] == out[label], label
    assert len({out[label]["return"] for label in ("none", "shipped", "margin")}) == 3  # three different routers


def trace_env(tmp_path: Path, name: str, stamps_ms: list[int]) -> dict:
    """The QoSEdge env on a Mooncake-format trace with these arrival times (contents from the task)."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 100, "output_length": 50, "hash_ids": [0]})
                            + "\n" for t in stamps_ms))
    return {"id": "qos_edge", "num_requests": len(stamps_ms), "max_experts": 10,
            "arrival": {"kind": "trace", "trace": {"kind": "mooncake", "path": str(path)}}}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_evaluation_and_the_live_router_apply_the_margin_on_bunched_arrivals_only(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    export = tmp_path / "export"
    shutil.copytree(zoo.ZOO_DIR / "qos_edge" / "export", export)
    meta = json.loads((export / "manifest.json").read_text())
    gate = {**BURST, "kwargs": meta["load_gate"]["kwargs"]}  # the heuristic's options as the export wrote them
    (export / "manifest.json").write_text(json.dumps({**meta, "load_gate": gate}))
    policies = [{"checkpoint": "zoo:qos_edge", "label": "burst", "load_gate": BURST},
                {"checkpoint": "zoo:qos_edge", "label": "anyhow", "load_gate": {**BURST, "margin_burst": None}},
                {"checkpoint": "zoo:qos_edge", "label": "network", "load_gate": "none"},
                {"name": "onnx", "kwargs": {"path": str(export)}, "label": "live"}]
    out = {}
    for name, stamps in (("bursty", [k // 8 * 1600 for k in range(120)]), ("even", [200 * k for k in range(120)])):
        rows = evaluate(trace_env(tmp_path, name, stamps), policies, seeds=[1001])
        out[name] = {r["policy"]: {k: r[k] for k in KEYS} for r in rows}
        assert out[name]["live"] == out[name]["burst"], name
    assert out["even"]["burst"] == out["even"]["network"]  # nothing bunched: the network decides
    assert out["even"]["anyhow"] != out["even"]["network"]  # where the margin alone would have changed decisions
    assert out["bursty"]["burst"] != out["bursty"]["network"]  # 7 of 8 bunched: the margin applies, as it does
    assert out["bursty"]["burst"] == out["bursty"]["anyhow"]  # without the condition (the first decision, before
    # anything came bunched, is the network's; on this empty cluster it is the heuristic's too)
