"""A load gate's ``costless`` hand-over and ``informed`` heuristic (envs/load_gate.py): from ``below`` on, the
heuristic still decides wherever its own estimate says its choice costs nothing (``qos_lookahead``: the newcomer
within its latency limit, no running request pushed past it), and it is told what the network decides. Pinned here:
the lookahead's ``choose`` is ``route`` without the memory, and says "costless" exactly where that holds; on a light
load every decision is the lookahead's, on a heavy one the network keeps some; an informed (or costless) gate's
lookahead remembers the network's placements too, an uninformed one only its own; the live router applies both as
evaluation does; a heuristic that cannot be told is refused in one line; a gate without them is written as
before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from llmsim.agents import zoo  # noqa: E402
from llmsim.agents.episodes import evaluate  # noqa: E402
from llmsim.agents.policy_specs import build_policy, normalise_spec  # noqa: E402
from llmsim.cluster import InstanceConfig  # noqa: E402
from llmsim.engine.config import EngineConfig  # noqa: E402
from llmsim.envs.load_gate import LoadGate  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.request import Request  # noqa: E402
from llmsim.routing.quality import QoSLookaheadRouter  # noqa: E402
from llmsim.simulation.run import simulate  # noqa: E402
from llmsim.testing import LinearProfile  # noqa: E402

COSTLESS = {"router": "qos_lookahead", "below": 1e-9, "costless": True}  # never light: costless hand-overs only
INFORMED = {"router": "qos_lookahead", "below": 1e-9, "informed": True}  # the network decides; the lookahead told
MIXED = {"router": "qos_lookahead", "below": 1e-9, "margin": 2.0}  # the lookahead's action where the network is unsure
KEYS = ("return", "avg_qos", "mean_e2el_ms", "dropped", "workload_digest")
LIGHT = {"id": "qos_edge", "num_requests": 60, "rate": 0.5, "max_experts": 10}
MID = {"id": "qos_edge", "num_requests": 300, "rate": 8.0, "max_experts": 10}  # light and heavy stretches
HEAVY = {"id": "qos_edge", "num_requests": 150, "rate": 40.0, "max_experts": 10}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


class Recording(QoSLookaheadRouter):
    """The lookahead, keeping what ``choose`` answered before each routing."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.answers: list[tuple[int, bool]] = []

    def route(self, req, view) -> int:
        self.answers.append(self.choose(req, view))
        return super().route(req, view)


def two_experts(limit: float) -> tuple[list[InstanceConfig], list[Request], dict]:
    """Two experts whose step is 0.01 + 2e-5 x decode context, two 800-token prompts a second apart (alone, one
    decodes at ~27 ms per token; two on one expert push both over 30 ms)."""
    models = ["alpaca-native", "chatglm-6b"]
    q = {"alpaca-native": 0.9, "chatglm-6b": 0.5}
    instances = [InstanceConfig(model=m, engine=EngineConfig(policy="vllm_v0"),
                                profile=LinearProfile(kv_tokens=1_000_000, base=0.01, per_token=0.0, per_ctx=2e-5))
                 for m in models]
    reqs = [Request(i, a, 800, 200, outputs_by_model={m: 200 for m in q}, quality_by_model=q)
            for i, a in enumerate((0.0, 1.0))]
    return instances, reqs, {"models": models, "k1": 0.0, "k2": 2e-5, "base": 0.01, "latency_limit": limit}


def test_choose_is_route_without_memory_and_costless_where_nothing_is_lost() -> None:
    instances, reqs, kw = two_experts(0.03)
    router = Recording(**kw)
    res = simulate(instances, reqs, router)
    placed = [int(i) for i in res.requests.sort_values("id")["instance"]]
    # the first goes to the better expert, free; the second to the other one, where it hurts nobody: free too
    assert router.answers == [(0, True), (1, True)] and placed == [0, 1]
    instances, reqs, kw = two_experts(0.02)  # a limit nobody can meet: the choice earns nothing, never costless
    router = Recording(**kw)
    simulate(instances, reqs, router)
    assert [free for _, free in router.answers] == [False, False]
    assert set(router._seen) == {0, 1}  # route remembers what it placed


def test_on_a_light_load_the_costless_gate_is_the_lookahead_and_on_a_heavy_one_it_mixes() -> None:
    specs = [{"checkpoint": "zoo:qos_edge", "label": "costless", "load_gate": COSTLESS},
             {"checkpoint": "zoo:qos_edge", "label": "network", "load_gate": "none"}, "qos_lookahead"]
    light = {r["policy"]: {k: r[k] for k in KEYS} for r in evaluate(LIGHT, specs, seeds=[1001])}
    assert light["costless"] == light["qos_lookahead"]
    assert light["network"] != light["qos_lookahead"]  # else the first proves nothing
    heavy = {r["policy"]: {k: r[k] for k in KEYS} for r in evaluate(HEAVY, specs, seeds=[1001])}
    assert heavy["costless"]["return"] not in (heavy["network"]["return"], heavy["qos_lookahead"]["return"])


def placed_and_remembered(gate: dict) -> tuple[set[int], set[int]]:
    """The requests placed in one heavy episode under ``gate``, and those its lookahead remembers at the end."""
    env = make_from_config(HEAVY)
    policy = build_policy(normalise_spec({"checkpoint": "zoo:qos_edge", "label": "gated", "load_gate": gate}), env,
                          HEAVY)
    obs, info = env.reset(seed=1001)
    policy.reset(env, 1001)
    placed: set[int] = set()
    while not (env.terminated or env.truncated):
        req = env.pending
        a = policy.act(obs, info["action_mask"], env)
        if req is not None and env.decode(a) >= 0:
            placed.add(req.id)
        obs, _, _, _, info = env.step(a)
    return placed, set(policy.fallback.router._seen)


@pytest.mark.parametrize("gate", [COSTLESS, INFORMED])
def test_a_told_lookahead_remembers_what_the_network_placed(gate: dict) -> None:
    placed, seen = placed_and_remembered(gate)
    assert placed and placed <= seen  # the network's placements included, not only the lookahead's own


def test_an_untold_lookahead_knows_only_what_it_routed() -> None:
    placed, seen = placed_and_remembered({**INFORMED, "informed": False})  # never light, no margin: never asked
    assert placed and not seen


@pytest.mark.timeout(300)
def test_the_live_router_applies_costless_and_informed_gates_as_evaluation_does(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    meta = json.loads((zoo.ZOO_DIR / "qos_edge" / "export" / "manifest.json").read_text())
    specs = [{"checkpoint": "zoo:qos_edge", "label": "network", "load_gate": "none"},
             {"checkpoint": "zoo:qos_edge", "label": "uninformed", "load_gate": MIXED}]
    for label, gate in (("costless", COSTLESS), ("informed", {**MIXED, "informed": True})):
        export = tmp_path / label
        shutil.copytree(zoo.ZOO_DIR / "qos_edge" / "export", export)
        live_gate = {**gate, "kwargs": meta["load_gate"]["kwargs"]}  # the heuristic's options as the export wrote
        (export / "manifest.json").write_text(json.dumps({**meta, "load_gate": live_gate}))
        specs += [{"checkpoint": "zoo:qos_edge", "label": label, "load_gate": gate},
                  {"name": "onnx", "kwargs": {"path": str(export)}, "label": f"live {label}"}]
    out = {r["policy"]: {k: r[k] for k in KEYS} for r in evaluate(MID, specs, seeds=[1001])}
    for label in ("costless", "informed"):
        assert out[f"live {label}"] == out[label], label
    assert out["costless"] != out["network"]
    assert out["informed"] != out["uninformed"]  # what it is told changes the lookahead's later answers


@pytest.mark.parametrize("key", ["costless", "informed"])
def test_a_heuristic_that_cannot_be_told_is_refused_in_one_line(key: str) -> None:
    with pytest.raises(ConfigError) as e:
        LoadGate.parse({"router": "jsq", "below": 2, key: True})
    assert str(e.value).startswith("load_gate") and f"{key}: 'jsq'" in str(e.value) and "\n" not in str(e.value)


def test_a_gate_without_it_is_written_as_before_and_with_it_carries_it() -> None:
    plain = LoadGate.parse({"router": "qos_lookahead", "below": 2}).model_dump()
    assert "costless" not in plain and "informed" not in plain
    assert LoadGate.parse(COSTLESS).model_dump()["costless"] is True
    assert LoadGate.parse(INFORMED).model_dump()["informed"] is True
