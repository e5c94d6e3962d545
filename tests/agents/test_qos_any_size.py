"""One QoSEdge router for any number of experts: the graph state padded to ``max_experts`` slots with a mask of
the present experts. Absent slots change nothing (whatever they hold), the padded HAN is PyG's HANConv on the
present experts, a policy trained over drawn expert counts runs on fewer experts (checkpoint, ONNX, live router)
and refuses more in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.checkpoint import CheckpointPolicy  # noqa: E402
from llmsim.agents.han import DenseHAN, GraphLayout, PackedHAN, random_observation  # noqa: E402
from llmsim.agents.policy import run_episode  # noqa: E402
from llmsim.agents.policy_specs import policy_env_cfg  # noqa: E402
from llmsim.agents.sac import DiscreteSAC  # noqa: E402
from llmsim.agents.sac_base import SACConfig  # noqa: E402
from llmsim.agents.sac_nets import ColumnHead, ExpertHead  # noqa: E402
from llmsim.agents.train import train  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402

M, CAP = 6, 10
ENV = {"id": "qos_edge", "num_requests": 60, "experts": 4, "rate": 3.3, "max_experts": 5}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def absent(obs: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """``obs`` with only its first ``n`` expert slots present (the others zeroed, as GraphObs leaves them)."""
    o = {k: v.copy() for k, v in obs.items()}
    o["expert_mask"][n:] = 0
    o["expert"][n:] = 0
    for g in range(3):
        o["arrived"][0, g * M + n:(g + 1) * M] = 0
    for k in ("running", "running_mask", "waiting", "waiting_mask"):
        o[k][n * CAP:] = 0
    return o


def garbage(obs: dict[str, np.ndarray], n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random features (and queue masks) in every absent slot, the expert mask unchanged."""
    o = {k: v.copy() for k, v in obs.items()}
    o["expert"][n:] = rng.uniform(0, 5, o["expert"][n:].shape)
    for g in range(3):
        o["arrived"][0, g * M + n:(g + 1) * M] = rng.uniform(0, 5, M - n)
    for k in ("running", "waiting"):
        o[k][n * CAP:] = rng.uniform(0, 5, o[k][n * CAP:].shape)
        o[f"{k}_mask"][n * CAP:] = 1
    return o


def _agent(layout: GraphLayout) -> DiscreteSAC:
    import gymnasium as gym

    space = gym.spaces.Dict({k: gym.spaces.Box(0, 1e3, s) for k, s in layout.shapes.items()})
    cfg = SACConfig.parse({"name": "sac", "han_hidden": 32, "hidden": [32, 32]})
    return DiscreteSAC(space, M + 2, cfg, seed=0)


def test_absent_expert_slots_change_no_action_score_or_q_value():
    layout = GraphLayout.for_experts(M, CAP, CAP, padded=True)
    agent = _agent(layout)
    assert isinstance(agent.actor.head, ExpertHead) and agent.actor.head.n == M
    rng = np.random.default_rng(0)
    for n in (1, 3, 5):
        clean = absent(random_observation(layout, rng), n)
        dirty = garbage(clean, n, rng)
        outs = []
        for o in (clean, dirty):  # one row each: a row's place in a batch moves the last bit of a matmul
            x = torch.from_numpy(layout.flatten(o))
            with torch.no_grad():
                outs.append((agent.actor(x), *agent.q_values(agent.critic, agent.encoder(x))))
        keep = [*range(n), M, M + 1]  # the present experts, wait, drop
        for got, want in zip(outs[1], outs[0], strict=True):
            assert torch.equal(got[0, keep], want[0, keep])
        # a mask that hid present experts would fail: a PRESENT expert's features do move the embedding
        hit = {k: v.copy() for k, v in clean.items()}
        hit["expert"][n - 1] += 1.0
        with torch.no_grad():
            moved = agent.encoder(torch.from_numpy(layout.flatten(hit))) - agent.encoder(torch.from_numpy(
                layout.flatten(clean)))
        assert moved.abs().max() > 1e-3


def test_padded_han_is_hanconv_on_the_present_experts_only():
    pytest.importorskip("torch_geometric")
    from llmsim.agents.han import load_pyg_weights, pyg_forward, pyg_reference

    layout = GraphLayout.for_experts(M, CAP, CAP, padded=True)
    torch.manual_seed(0)
    convs = pyg_reference(layout, 64, 4, 2)
    dense = DenseHAN(layout, 64, 4, 2)
    load_pyg_weights(dense, convs)
    rng = np.random.default_rng(1)
    for n in (1, 2, 4, 6):
        obs = absent(random_observation(layout, rng), n)
        got = dense(torch.from_numpy(layout.flatten(garbage(obs, n, rng))))[0]
        assert torch.allclose(got, pyg_forward(convs, obs), atol=1e-5)


def test_all_slots_present_equals_the_unpadded_network():
    plain, padded = GraphLayout.for_experts(M, CAP, CAP), GraphLayout.for_experts(M, CAP, CAP, padded=True)
    torch.manual_seed(0)
    a = PackedHAN(DenseHAN(plain, 32, 4, 2))
    b = PackedHAN(DenseHAN(padded, 32, 4, 2))
    b.load_state_dict(a.state_dict())
    obs = random_observation(padded, np.random.default_rng(2))
    want = a(torch.from_numpy(plain.flatten({k: v for k, v in obs.items() if k != "expert_mask"})))
    assert torch.allclose(b(torch.from_numpy(padded.flatten(obs))), want, atol=1e-6)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 decisions of discrete SAC over the padded HAN state, 2-5 experts drawn per episode."""
    d = tmp_path_factory.mktemp("any_size")
    cfg = {"env": ENV, "seed": 0, "label": "any_size_test",
           "validation": [{"experts": 4, "rate": 3.3}, {"experts": 2, "rate": 1.7}],
           "randomize": {"size_option": "experts", "sizes": [2, 5], "rate_per_instance": 0.8333,
                         "rate_scale": [1.0, 1.0], "mixes": [], "gpus": ["rtx4090"], "curriculum_episodes": 2,
                         "start_size": 4, "num_requests": 60},
           "agent": {"name": "sac", "encoder": "han", "han_hidden": 16, "hidden": [16, 16], "batch_size": 32,
                     "learning_starts": 100, "buffer_size": 2000, "train_freq": 4},
           "trainer": {"total_steps": 400, "eval_every": 200, "eval_seeds": [1000, 1001], "progress": False,
                       "eval_metric": "avg_qos"}}
    train(cfg, d)
    return d


def test_a_checkpoint_records_its_slots_and_runs_on_fewer_experts(run: Path):
    meta = json.loads((run / "best" / "checkpoint.json").read_text())
    assert meta["slots"] == 5 and meta["n_actions"] == 7 and meta["env"]["max_experts"] == 5
    evals = json.loads((run / "last" / "checkpoint.json").read_text())["evaluations"]
    assert [e["score"] == e["avg_qos"] for e in evals] == [True, True]  # validation by average QoS, no guide
    for n in (2, 5):
        env = make_from_config({**ENV, "experts": n, "rate": 0.8333 * n})
        pol = CheckpointPolicy(run / "best")
        out = run_episode(pol, env, seed=1000, workload_seed=1000)
        assert out["summary"]["completed"] + out["summary"]["dropped"] == 60
        # 2 of 5 slots: the head scores the env's 4 actions; 5 of 5: the slots are the env's actions
        assert isinstance(pol.net.head, ColumnHead) == (n < 5)


def test_more_experts_or_an_unpadded_env_is_refused_in_one_line(run: Path):
    spec = {"kind": "checkpoint", "path": str(run / "best")}
    scenario = {"id": "qos_edge", "num_requests": 60, "experts": 8, "rate": 6.67}
    cfg = policy_env_cfg(scenario, spec)
    assert cfg["max_experts"] == 5  # the suite gives the checkpoint's env its slots
    with pytest.raises(ConfigError, match="5 expert slots cannot hold 8 experts") as e:
        make_from_config(cfg)
    assert "\n" not in str(e.value)
    plain = make_from_config({k: v for k, v in ENV.items() if k != "max_experts"})
    with pytest.raises(ConfigError, match="observation layout"):
        CheckpointPolicy(run / "best").reset(plain, 0)


@pytest.mark.slow
def test_one_export_of_the_checkpoint_routes_fewer_experts_live(run: Path, tmp_path: Path):
    pytest.importorskip("onnxruntime")
    from llmsim.agents.export import export
    from llmsim.envs.policy_router import ExportedRouter
    from llmsim.request import Request
    from llmsim.routing import DROP
    from llmsim.state.state_view import StateView

    n = 3
    out = export(run / "best", out=tmp_path / "x", check_steps=64)  # over its expert slots: any number up to them
    manifest = json.loads((out / "manifest.json").read_text())
    slots = manifest["actions"]["slots"]
    assert slots > n and manifest["actions"]["n"] == slots + 2
    assert manifest["export_check"]["mismatches_outside_ties"] == 0
    env = make_from_config({**ENV, "experts": n, "rate": 2.5})
    router = ExportedRouter(path=str(out))  # its own noisy predictions: the same kind of decision, not the same one
    obs, info = env.reset(seed=1000, options={"workload_seed": 1000})
    seen = set()
    for _ in range(60):
        req = env.pending
        if req is not None:
            d = router.route(Request(req.id, req.arrival, req.prompt_tokens, req.output_tokens),
                             StateView(env.state()))
            assert d in (*range(n), DROP)  # one of the 3 experts (never an absent slot) or a drop
            seen.add(d)
        obs, _, term, trunc, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        if term or trunc:
            break
    assert seen
