"""The router zoo (llmsim.agents.zoo, docs/zoo.md): every shipped router resolves by name, its manifest is complete,
its checkpoint loads weights-only and acts on its testbed env, its export's hash is checked, and ``zoo:<name>``
works wherever a checkpoint or an export directory is accepted. No training here: the zoo's own files are read."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from llmsim.agents import zoo
from llmsim.agents.policy_specs import checkpoint_specs, normalise_spec
from llmsim.envs.exported import read_manifest, resolve_zoo
from llmsim.errors import ConfigError

SHIPPED = ("best_effort", "qos_edge", "workload_router")  # one router per testbed
NAMES = zoo.names()


def test_the_zoo_ships_one_router_per_testbed() -> None:
    assert set(SHIPPED) <= set(NAMES), NAMES
    assert {zoo.entry(n).testbed for n in SHIPPED} == set(SHIPPED)


@pytest.mark.parametrize("call", [zoo.entry, lambda n: checkpoint_specs([n]), lambda n: resolve_zoo(n, "export"),
                                  lambda n: normalise_spec({"checkpoint": n})])
def test_an_unknown_name_is_one_line_listing_the_names(call) -> None:
    with pytest.raises(ConfigError) as e:
        call("zoo:no_such_router")
    msg = str(e.value)
    assert "\n" not in msg and "no_such_router" in msg
    assert all(n in msg for n in NAMES), msg


def test_a_plain_path_is_not_resolved_through_the_zoo(tmp_path) -> None:
    assert resolve_zoo(tmp_path, "export") == tmp_path
    assert zoo.checkpoint_dir(str(tmp_path)) == tmp_path


@pytest.mark.parametrize("name", NAMES)
def test_an_entry_is_complete(name) -> None:
    e = zoo.entry(name)
    assert e.name == name and e.dir == zoo.ZOO_DIR / name and zoo.entry(f"zoo:{name}") == e
    assert zoo.missing_keys(e.manifest) == [], f"{name}: manifest lacks {zoo.missing_keys(e.manifest)}"
    m = e.manifest
    assert m["name"] == name and m["testbed"] == e.testbed
    assert m["train_command"].startswith("llmsim-train ") and "\n" not in m["train_command"]
    assert 0 <= m["train_seed"] < 1000, "a training seed is below 1000 (validation 1000-1999, test >= 2000)"
    assert m["steps"] > 0 and m["wall_s"] > 0 and m["cpu_s"] > 0
    assert (e.checkpoint_dir / "checkpoint.json").is_file() and e.export_dir is not None
    assert e.suite_json is not None and m["suite"].get("bars"), f"{name}: no unseen-suite summary"
    assert all(s >= 2000 for s in m["suite"]["seeds"]), "the suite is reported on test seeds"


@pytest.mark.parametrize("name", NAMES)
def test_an_entry_is_small_and_names_no_outside_directory(name) -> None:
    e = zoo.entry(name)
    files = [f for f in e.dir.rglob("*") if f.is_file()]
    assert sum(f.stat().st_size for f in files) < 1_000_000, f"{name}: over 1 MB"
    assert not {f.name for f in files} & {"trainer.pt", "replay.npz"}, "only what loading needs"
    for f in files:
        if f.suffix in (".json", ".yaml"):
            text = f.read_text()
            assert "/work/" not in text and "/tmp/" not in text and "outputs/train" not in text, f


@pytest.mark.parametrize("name", NAMES)
def test_the_export_hash_is_checked(name, tmp_path) -> None:
    e = zoo.entry(name)
    m = read_manifest(f"zoo:{name}")
    assert m == read_manifest(e.export_dir)
    bad = tmp_path / "export"
    shutil.copytree(e.export_dir, bad)
    data = bytearray((bad / m["onnx"]["file"]).read_bytes())
    data[-1] ^= 0xFF
    (bad / m["onnx"]["file"]).write_bytes(bytes(data))
    pytest.importorskip("onnxruntime", reason="loading an export needs the export extra")
    from llmsim.envs.exported import ExportedPolicy

    with pytest.raises(ConfigError, match="sha256"):
        ExportedPolicy.load(bad)
    ExportedPolicy.load(f"zoo:{name}")


@pytest.mark.parametrize("name", NAMES)
def test_the_checkpoint_loads_and_acts_on_its_testbed(name) -> None:
    pytest.importorskip("torch", reason="a checkpoint needs the rl extra")
    from llmsim.agents.checkpoint import CheckpointPolicy
    from llmsim.agents.env_setup import make_env

    e = zoo.entry(name)
    (spec,) = checkpoint_specs([f"zoo:{name}"])
    assert spec["path"] == str(e.checkpoint_dir)
    policy = CheckpointPolicy(spec["path"])
    env = make_env({**policy.meta["env"], "num_requests": 30})
    obs, info = env.reset(seed=2000)
    policy.reset(env, 2000)
    for _ in range(20):
        a = policy.act(obs, info["action_mask"], env)
        assert info["action_mask"][a]
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break


@pytest.mark.parametrize("name", NAMES)
def test_the_onnx_router_takes_a_zoo_name(name) -> None:
    pytest.importorskip("onnxruntime", reason="the onnx router needs the export extra")
    from llmsim.routing import make_router

    router = make_router("onnx", seed=0, path=f"zoo:{name}")
    assert router.path == zoo.entry(name).export_dir
    with pytest.raises(ConfigError, match="no such router"):
        make_router("onnx", seed=0, path="zoo:nope")


def test_the_live_router_config_takes_a_zoo_name() -> None:
    pytest.importorskip("onnxruntime", reason="the onnx router needs the export extra")
    from llmsim.serving.config import PolicyConfig
    from llmsim.serving.decider import Decider

    d = Decider(PolicyConfig.parse({"onnx": "zoo:workload_router"}))
    assert d.router.path == zoo.entry("workload_router").export_dir


def test_evaluate_config_parsing_takes_a_zoo_name() -> None:
    from llmsim.agents.evaluate import EvaluateConfig

    c = EvaluateConfig.parse({"checkpoints": ["zoo:best_effort", {"mine": "zoo:qos_edge"}]})
    specs = checkpoint_specs(c.checkpoints)
    assert [s["path"] for s in specs] == [str(zoo.entry(n).checkpoint_dir) for n in ("best_effort", "qos_edge")]
    assert specs[1]["label"] == "mine"
    # the mapping form (label -> directory, several at once) resolves zoo names too
    both = checkpoint_specs({"a": "zoo:best_effort", "b": "zoo:qos_edge"})
    assert [(s["label"], s["path"]) for s in both] == [("a", specs[0]["path"]), ("b", specs[1]["path"])]


def test_the_suite_is_trimmed_to_results_and_names_the_router_by_zoo_name() -> None:
    body = {"suite": "unseen", "rows": [{"x": 1}], "config": {"a": 1}, "bars": {"p": [{"name": "b", "gains": {}}]},
            "policies": [{"kind": "checkpoint", "path": "/somewhere/best", "label": "p"}, {"kind": "router"}],
            "seeds": [2000], "results": {"s": {}}, "incompatible": {"s": {"/somewhere/best": "/somewhere/best: no"}}}
    out = zoo.trim_suite(body, "qos_edge")
    assert "rows" not in out and "config" not in out
    assert out["incompatible"] == {"s": {"zoo:qos_edge": "zoo:qos_edge: no"}}
    assert out["policies"][0]["path"] == "zoo:qos_edge" and "/somewhere" not in json.dumps(out)
    assert zoo.suite_summary(body)["bars"] == {"p": [{"name": "b"}]}


@pytest.mark.parametrize("name", NAMES)
def test_the_shipped_suite_has_verdicts_on_test_seeds(name) -> None:
    body = json.loads(zoo.entry(name).suite_json.read_text())
    assert "rows" not in body and body["learned"] and body["results"]
    assert min(body["seeds"]) >= 2000
    for verdicts in body["bars"].values():
        assert all(isinstance(v.get("holds"), bool) for v in verdicts), verdicts
    assert np.isfinite([len(body["results"])]).all()


@pytest.mark.slow  # an export with its self-check: ~6 s alone, more on a loaded machine
def test_ship_puts_a_checkpoint_its_export_and_a_complete_manifest_into_a_zoo(tmp_path) -> None:
    pytest.importorskip("torch", reason="shipping exports with torch (the rl extra)")
    pytest.importorskip("onnxruntime", reason="shipping exports to ONNX (the export extra)")
    from llmsim.agents.imitate import demo_checkpoint

    ckpt = demo_checkpoint("ddqn_flat", tmp_path / "run")
    (ckpt / "trainer.pt").write_bytes(b"not needed")
    root = tmp_path / "zoo"
    d = zoo.ship("demo", "workload_router", ckpt, "llmsim-train seed=1", 1000, 12.5, 10.0, "a demo", root=root)
    m = json.loads((d / "manifest.json").read_text())
    assert zoo.missing_keys(m) == [], "only the suite summary is filled in later, as {}"
    assert m["steps"] == 1000 and m["train_command"] == "llmsim-train seed=1" and m["testbed"] == "workload_router"
    assert not (d / "checkpoint" / "trainer.pt").exists() and (d / "checkpoint" / "checkpoint.json").is_file()
    export = json.loads((d / "export" / "manifest.json").read_text())
    assert export["checkpoint"] == "../checkpoint", "the zoo names no directory outside itself"
    read_manifest(d / "export")  # the sha256 is the file's
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    (suite_dir / "suite.json").write_text(json.dumps({
        "suite": "unseen", "seeds": [2000, 2001], "rows": [1, 2], "learned": ["demo"], "primary": "mean_e2el_ms",
        "bars": {"demo": [{"name": "b", "holds": False, "met": 0, "scenarios": 1, "gains": {"s": -3.0}}]},
        "results": {"s": {"reference": "jsq", "stats": {"jsq": {"mean_e2el_ms": 1.0, "p99_e2el_ms": 2.0},
                                                        "rr": {"mean_e2el_ms": 3.0, "p99_e2el_ms": 4.0}},
                          "gains": {}}}}))
    zoo.add_suite("demo", suite_dir, "llmsim-evaluate suite=unseen", root=root)
    m = json.loads((d / "manifest.json").read_text())
    assert m["suite"]["bars"] == {"demo": [{"name": "b", "holds": False, "met": 0, "scenarios": 1}]}
    body = json.loads((d / "suite.json").read_text())
    assert "rows" not in body and body["results"]["s"]["stats"]["rr"] == {"mean_e2el_ms": 3.0}
    assert body["results"]["s"]["stats"]["jsq"]["p99_e2el_ms"] == 2.0, "the reference keeps every statistic"


@pytest.mark.parametrize("order", [["v100-16gb", "v100-16gb", "v100-32gb", "a100-40gb"],
                                   ["a100-40gb", "v100-32gb", "v100-16gb", "v100-16gb"]])
def test_the_split_guided_export_warns_once_when_backends_are_not_listed_smallest_cache_first(order, caplog) -> None:
    """Its large group is the last half by position: a cluster listed largest cache first gets one warning line
    naming the KV sizes, a cluster in order none."""
    pytest.importorskip("onnxruntime", reason="the onnx router needs the export extra")
    from llmsim.agents.episodes import evaluate
    from llmsim.errors import load_yaml_file
    from llmsim.resources import conf_dir

    env = {**load_yaml_file(conf_dir() / "env" / "workload_router.yaml"), "num_requests": 12, "gpu": order}
    with caplog.at_level("WARNING", logger="llmsim.envs.policy_router"):
        rows = evaluate(env, [{"name": "onnx", "kwargs": {"path": "zoo:workload_router"}}], seeds=[2000], jobs=1)
    assert rows[0]["completed"] == 12
    warned = [r.getMessage() for r in caplog.records if "smallest cache first" in r.getMessage()]
    assert len(warned) == (0 if order[0] == "v100-16gb" else 1)
    if warned:
        assert "workload_router" in warned[0] and "tokens" in warned[0]


SLOT_EXPORTS = {  # a zoo router whose export runs on any number of backends: slots, env options per size
    "workload_router": (16, [{"num_instances": 2}, {"num_instances": 8}]),
    "qos_edge": (10, [{"experts": 3, "max_experts": 10}, {"experts": 9, "max_experts": 10}]),
}


@pytest.mark.parametrize("name", sorted(SLOT_EXPORTS))
def test_a_slot_export_runs_on_any_number_of_backends_as_its_checkpoint_does(name) -> None:
    """One export for any cluster up to its slots: its actions are the slots (+ wait, drop), and on clusters of
    sizes it was not exported for the ONNX router decides as the checkpoint acts there (its light-load gate
    included): the same episodes, request for request."""
    pytest.importorskip("onnxruntime", reason="the onnx router needs the export extra")
    pytest.importorskip("torch", reason="a checkpoint needs the rl extra")
    from llmsim.agents.episodes import evaluate
    from llmsim.errors import load_yaml_file
    from llmsim.resources import conf_dir

    slots, sizes = SLOT_EXPORTS[name]
    e = zoo.entry(name)
    m = read_manifest(e.export_dir)
    assert m["actions"]["slots"] == slots and m["actions"]["n"] == slots + 2
    base = load_yaml_file(conf_dir() / "env" / f"{e.testbed}.yaml")
    for size in sizes:
        env = {**base, "num_requests": 60, **size}
        rows = evaluate(env, [{"name": "onnx", "kwargs": {"path": f"zoo:{name}"}},
                              {"kind": "checkpoint", "path": str(e.checkpoint_dir)}], seeds=[2000], jobs=1)
        onnx, ckpt = ({k: v for k, v in r.items() if k not in ("policy", "wall_s")} for r in rows)
        assert onnx["completed"] > 0 and onnx == ckpt, size


def test_a_slot_export_refuses_more_backends_than_slots_or_a_model_it_does_not_know() -> None:
    pytest.importorskip("onnxruntime", reason="the onnx router needs the export extra")
    from llmsim.routing import make_router

    router = make_router("onnx", seed=0, path="zoo:workload_router")
    router.check_backends(["llama-2-7b"] * 3)  # fewer than it was trained with: fine
    assert router.spec.n_choices == 3 and router.ctx.num_instances == 3
    with pytest.raises(ConfigError, match=r"1 to 16 backends .* 17 instances"):
        router.check_backends(["llama-2-7b"] * 17)
    with pytest.raises(ConfigError, match=r"models \['llama-2-7b'\].*opt-13b"):
        router.check_backends(["llama-2-7b", "opt-13b"])


@pytest.mark.parametrize("slots", [-1, True, "16", 15])
def test_a_malformed_slot_layout_is_one_line(slots, tmp_path) -> None:
    pytest.importorskip("onnxruntime", reason="the onnx router needs the export extra")
    from llmsim.routing import make_router

    d = tmp_path / "wr"
    shutil.copytree(zoo.entry("workload_router").export_dir, d)
    m = json.loads((d / "manifest.json").read_text())
    m["actions"]["slots"] = slots
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ConfigError, match="actions.slots .*actions.n = slots \\+ 2"):
        make_router("onnx", seed=0, path=str(d))


@pytest.mark.parametrize("name,env_id", [("qos_edge", "best_effort"), ("workload_router", "qos_edge"),
                                         ("best_effort", "workload_router")])
def test_a_checkpoint_on_another_testbed_is_one_line_naming_both(name, env_id) -> None:
    """A checkpoint evaluated on another testbed's env used to fail on a key of its own testbed (QoSEdge's
    ``max_experts``: "env: unknown key 'max_experts'") or, padded slots fitting, to run silently (the WorkloadRouter's
    Llama-2-7B router on the QoSEdge experts)."""
    from llmsim.agents.policy_specs import policy_env_cfg

    (spec,) = checkpoint_specs([f"zoo:{name}"])
    with pytest.raises(ConfigError, match=rf"^{spec['path']}: trained on env '{name}', but this env is '{env_id}' "
                                          rf"\(evaluate it with env={name}\)$"):
        policy_env_cfg({"id": env_id, "num_requests": 20}, spec)
    assert policy_env_cfg({"id": name, "num_requests": 20}, spec)["num_requests"] == 20
