"""llmsim-export (agents/export.py), the exported policy (envs/exported.py) and the ``onnx`` router
(envs/policy_router.py): parity with the in-Python policy on recorded observations and inside episodes, manifest
refusals, bad inputs, and a serving process without torch.

Checkpoints are built with the project's save_checkpoint and briefly trained by behaviour cloning of JSQ (so their
actions depend on the state; random weights mostly pick one action), for the three policy types (flat DDQN,
best-effort DDQN with model-choice actions, SAC over the HAN graph state) and argmax-SAC.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from llmsim.agents.checkpoint import CheckpointPolicy, save_checkpoint  # noqa: E402
from llmsim.agents.checkpoint_meta import action_layout, observation_layout  # noqa: E402
from llmsim.agents.env_setup import make_env  # noqa: E402
from llmsim.agents.export import compare, export, rollout, torch_scores  # noqa: E402
from llmsim.agents.imitate import DEMO_ENVS, EXPERTS, demo_checkpoint  # noqa: E402
from llmsim.agents.nets import QNetwork  # noqa: E402
from llmsim.agents.policy import HeuristicPolicy, run_episode  # noqa: E402
from llmsim.envs.exported import ExportedPolicy, read_manifest  # noqa: E402
from llmsim.envs.policy_router import ExportedRouter, check_backends  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.routing import Router, make_router  # noqa: E402
from llmsim.state.cluster_state import LAYOUT_VERSION  # noqa: E402
from tests.helpers import REPO  # noqa: E402

ROOT = REPO
ENVS = DEMO_ENVS  # 4 x llama-2-7b for flat DDQN: the llmsim CLI's default cluster, so policy.name=onnx runs there
N_OBS = 1000
SCORE_ATOL = 1e-4


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def _build(kind: str, root: Path) -> tuple[Path, Path]:
    ckpt = demo_checkpoint(kind, root)
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    meta.update({"steps": 400, "episodes": 1, "best_score": 1.5, "evaluations": [{"step": 400, "score": 1.5}]})
    (ckpt / "checkpoint.json").write_text(json.dumps(meta))  # training metrics for the manifest test
    return ckpt, export(ckpt, check_steps=64)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("export")
    torch.set_num_threads(1)
    return {k: _build(k, root) for k in ENVS}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", list(ENVS))
def test_exported_policy_acts_like_the_checkpoint_on_recorded_observations(exports, kind):
    """1,000 observations of random valid routing: identical greedy actions, scores within SCORE_ATOL."""
    ckpt, out = exports[kind]
    m = read_manifest(out)
    assert m["policy"]["type"] == kind and m["observation"]["state_layout_version"] == LAYOUT_VERSION
    env = make_env(ENVS[kind])
    obs, masks = rollout(env, N_OBS, seed=11)
    ref_pol, pol = CheckpointPolicy(ckpt), ExportedPolicy.load(out)
    ref_pol.reset(env, 0)
    ref_actions = np.array([ref_pol.act(o, mk, env) for o, mk in zip(obs, masks)])
    got = [pol.run(o, mk) for o, mk in zip(obs, masks)]
    res = compare(torch_scores(ref_pol.net, obs, masks), ref_actions, np.stack([g[0] for g in got]),
                  np.array([int(g[1]) for g in got]))
    print(f"\n{kind}: {res}")
    assert res["observations"] == N_OBS and res["mismatches_outside_ties"] == 0, res
    assert res["identical_actions"] >= N_OBS - res["ties"], res
    assert res["max_abs_score_diff"] < SCORE_ATOL, res
    assert len(set(ref_actions.tolist())) >= 2  # the policy really depends on the state
    assert all(pol.act(o, mk) == a for o, mk, a in zip(obs[:20], masks[:20], ref_actions[:20]))


class _MinimalView:
    """What the live router passes: ``state()`` and ``num_instances`` only."""

    def __init__(self, view: Any) -> None:
        self.state, self.num_instances = view.state, view.num_instances


class _OnlyStateRouter(Router):
    name = "only_state"

    def __init__(self, inner: Router) -> None:
        super().__init__(0)
        self.inner = inner

    def route(self, req: Any, view: Any) -> int:
        return self.inner.route(req, _MinimalView(view))


class _Recorder:
    """A Policy recording the actions it takes where a request is decided."""

    def __init__(self, policy: Any) -> None:
        self.policy, self.name, self.actions = policy, policy.name, []

    def reset(self, env: Any, seed: int) -> None:
        self.policy.reset(env, seed)

    def act(self, obs: Any, mask: np.ndarray, env: Any) -> int:
        a = self.policy.act(obs, mask, env)
        if env.pending is not None:
            self.actions.append(a)
        return a


class _RouterPolicy:
    name = "onnx"

    def __init__(self, path: Path) -> None:
        self.path = path

    def reset(self, env: Any, seed: int) -> None:
        self.router = _OnlyStateRouter(make_router("onnx", seed=seed, path=str(self.path)))

    def act(self, obs: Any, mask: np.ndarray, env: Any) -> int:
        return env.heuristic_action(self.router)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", list(ENVS))
def test_onnx_router_in_an_episode_matches_the_checkpoint_policy(exports, kind):
    """The router path (ClusterState -> rebuilt builder -> ONNX -> shared decode) takes the checkpoint's actions."""
    ckpt, out = exports[kind]
    env = make_env(ENVS[kind])
    ref, got = _Recorder(CheckpointPolicy(ckpt)), _Recorder(_RouterPolicy(out))
    r_ref = run_episode(ref, env, seed=1000, workload_seed=1000)
    r_got = run_episode(got, env, seed=1000, workload_seed=1000)
    assert got.actions == ref.actions and len(ref.actions) >= ENVS[kind]["num_requests"]
    assert len(set(ref.actions)) >= 2, ref.actions[:50]
    assert r_got["return"] == r_ref["return"] and r_got["summary"] == r_ref["summary"]


@pytest.mark.timeout(120)
def test_evaluation_runs_the_onnx_router_like_the_checkpoint(exports):
    """agents/evaluate's path: HeuristicPolicy("onnx", path=...) -> env.heuristic_action -> route(req, view)."""
    ckpt, out = exports["ddqn_best_effort"]
    env = make_env(ENVS["ddqn_best_effort"])
    a = run_episode(CheckpointPolicy(ckpt), env, seed=1001, workload_seed=1001)
    b = run_episode(HeuristicPolicy("onnx", path=str(out)), env, seed=1001, workload_seed=1001)
    assert a["return"] == b["return"] and a["summary"] == b["summary"]


def _copy(out: Path, tmp: Path) -> Path:
    d = tmp / "copy"
    shutil.copytree(out, d)
    return d


def _edit(d: Path, fn: Any) -> None:
    m = json.loads((d / "manifest.json").read_text())
    fn(m)
    (d / "manifest.json").write_text(json.dumps(m))


@pytest.mark.timeout(60)
def test_manifest_mismatches_are_refused_with_both_sides(exports, tmp_path):
    _, out = exports["sac_han"]
    with pytest.raises(ConfigError, match=r"trained on 3 instances .*alpaca-native.* but the backends are 2 "
                                          r"instances \['alpaca-native', 'mpt-7b'\]"):
        ExportedRouter(path=str(out), models=["alpaca-native", "mpt-7b"])
    m = read_manifest(out)
    check_backends(m, list(EXPERTS))
    d = _copy(out, tmp_path)
    _edit(d, lambda m: m["observation"].__setitem__("state_layout_version", 99))
    with pytest.raises(ConfigError, match=rf"state_layout_version 99 .*LAYOUT_VERSION is {LAYOUT_VERSION}"):
        ExportedPolicy.load(d)
    _edit(d, lambda m: (m["observation"].__setitem__("state_layout_version", LAYOUT_VERSION),
                        m["observation"]["builder"].__setitem__("cap_running", 5)))
    with pytest.raises(ConfigError, match=r"observation 'graph' has shape .*\[30, 6\].* gives .*\[15, 6\]"):
        ExportedRouter(path=str(d))
    (d / "policy.onnx").write_bytes((out / "policy.onnx").read_bytes()[:-10])
    with pytest.raises(ConfigError, match="onnx.sha256"):
        ExportedPolicy.load(d)
    (d / "policy.onnx").unlink()
    with pytest.raises(ConfigError, match="onnx.file 'policy.onnx' is not a file"):
        ExportedPolicy.load(d)
    with pytest.raises(ConfigError, match="no manifest.json"):
        ExportedPolicy.load(tmp_path)
    with pytest.raises(ConfigError, match="policy.kwargs.path"):
        make_router("onnx")


@pytest.mark.timeout(60)
def test_a_serving_process_loads_and_runs_an_export_without_torch(exports, tmp_path):
    """numpy + onnxruntime + json: no torch, stable-baselines3 or agents module is imported, and the router is
    found through the llmsim.routers entry point."""
    ckpt, out = exports["sac_han"]
    env = make_env(ENVS["sac_han"])
    obs, masks = rollout(env, 50, seed=5)
    pol = CheckpointPolicy(ckpt)
    want = [pol.act(o, mk, env) for o, mk in zip(obs, masks)]
    np.savez(tmp_path / "obs.npz", masks=masks, **{k: np.stack([o[k] for o in obs]) for k in obs[0]})
    code = f"""
import sys, numpy as np
from llmsim.envs.exported import ExportedPolicy
from llmsim.routing import make_router
z = np.load({str(tmp_path / 'obs.npz')!r})
pol = ExportedPolicy.load({str(out)!r})
keys = [k for k in z.files if k != "masks"]
acts = [pol.act({{k: z[k][i] for k in keys}}, z["masks"][i]) for i in range(len(z["masks"]))]
assert acts == {want!r}, acts
r = make_router("onnx", path={str(out)!r})
assert type(r).__module__ == "llmsim.envs.policy_router", type(r)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "stable_baselines3", "agents"))
assert not bad, bad
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]


def _learned(tmp: Path) -> Path:
    env = make_env(ENVS["ddqn_flat"])
    meta = {"agent": "ddqn", "observation": observation_layout(env), "actions": action_layout(env),
            "env": {**ENVS["ddqn_flat"], "predictor": {"kind": "learned", "path": "predictor.json"}}}
    return save_checkpoint(tmp / "learned", QNetwork(int(env.observation_space.shape[0]), int(env.action_space.n)),
                           meta)


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", ["no_checkpoint", "format", "learned"])
def test_bad_inputs_are_one_line_and_exit_2(tmp_path, case):
    args = {"no_checkpoint": [f"checkpoint={tmp_path}"],
            "format": [f"checkpoint={tmp_path}", "format=tflite"],
            "learned": [f"checkpoint={_learned(tmp_path) if case == 'learned' else ''}"]}[case]
    want = {"no_checkpoint": "no checkpoint.json", "format": "format: 'tflite'", "learned": "env.predictor 'learned'"}
    p = subprocess.run([sys.executable, "-m", "llmsim.agents.export", *args, f"hydra.run.dir={tmp_path / 'run'}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=80)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim-export: error:") and want[case] in lines[0], p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_cli_exports_and_llmsim_runs_policy_onnx(exports, tmp_path):
    """``llmsim-export`` end to end, then the llmsim CLI with the onnx router on its default 4 x llama-2-7b
    cluster (the ddqn_flat export's models), and refused on a cluster of another size."""
    ckpt, _ = exports["ddqn_flat"]
    dest = tmp_path / "cli"
    p = subprocess.run([sys.executable, "-m", "llmsim.agents.export", f"checkpoint={ckpt}", f"out={dest}",
                        "check_steps=32", f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=80)
    assert p.returncode == 0 and "exported ddqn_flat" in p.stdout, p.stderr[-2000:]
    assert read_manifest(dest)["export_check"]["identical_actions"] == 32
    base = [sys.executable, "-m", "llmsim", "policy.name=onnx", f"+policy.kwargs.path={dest}",
            "workload.num_requests=40", "output.save=false", "output.progress=false", "output.plots=false",
            f"hydra.run.dir={tmp_path / 'sim'}"]
    p = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=80)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([*base, "cluster.instances.0.count=2"], cwd=ROOT, capture_output=True, text=True, timeout=80)
    assert p.returncode == 2 and "trained on 4 instances" in p.stderr and "backends are 2 instances" in p.stderr, \
        p.stderr[-2000:]
    assert "Traceback" not in p.stderr


def test_registry_plugin_lookup_names_the_entry_point_choices():
    from llmsim.routing import ROUTERS

    assert "onnx" in ROUTERS.plugin_names()
    with pytest.raises(ConfigError, match=r"unknown routing policy 'nope'; expected one of \[.*'onnx'"):
        make_router("nope")


def test_a_zoo_name_exports_to_the_out_given_and_never_into_the_zoo(tmp_path):
    """docs/zoo.md: ``zoo:<name>`` works wherever a checkpoint directory is accepted; llmsim-export used to say
    "zoo:best_effort: not a checkpoint directory"."""
    from llmsim.agents import zoo
    from llmsim.agents.export import export

    with pytest.raises(ConfigError, match=r"^out: required when checkpoint is a zoo name "):
        export("zoo:best_effort", check_steps=8)
    dest = export("zoo:best_effort", out=tmp_path / "be", check_steps=8)
    shipped = read_manifest(zoo.entry("best_effort").export_dir)
    made = read_manifest(dest)
    assert all(made[k] == shipped[k] for k in ("actions", "context"))
