"""What the envs load from disk runs no code and fails in one line: policy exports (manifest.json + policy.onnx,
envs/exported.py and envs/policy_router.py) and saved predictors (envs/predictors/length_buckets.py, qos.py).

The exports here are hand-built ONNX graphs (numpy + onnx + onnxruntime, no torch): a 3-feature linear scorer over
2 actions with the masked argmax every llmsim export ends with. Every crafted payload would create a marker file
if it ran; each test asserts the refusal and that the marker does not exist.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from llmsim.envs.actions import ActionSpec  # noqa: E402
from llmsim.envs.exported import FORMAT, FORMAT_VERSION, MANIFEST, ExportedPolicy, read_manifest  # noqa: E402
from llmsim.envs.policy_router import from_manifest  # noqa: E402
from llmsim.envs.predictors.from_config import make_agent_predictor  # noqa: E402
from llmsim.envs.predictors.length_buckets import train_predictor  # noqa: E402
from llmsim.envs.predictors.qos import QoSBucketModel, train_qos_predictor  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.state.cluster_state import LAYOUT_VERSION  # noqa: E402

W = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, -0.5]], np.float32)  # obs (3) -> scores of 2 actions


class Payload:
    """Unpickled, this would create ``marker``: proof that a file ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def policy_graph() -> bytes:
    """obs [B, 3] float, action_mask [B, 2] bool -> scores (obs @ W, -inf where masked), action (argmax)."""
    nodes = [helper.make_node("MatMul", ["obs", "W"], ["raw"]),
             helper.make_node("Where", ["action_mask", "raw", "neg_inf"], ["scores"]),
             helper.make_node("ArgMax", ["scores"], ["action"], axis=1, keepdims=0)]
    graph = helper.make_graph(
        nodes, "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("action_mask", TensorProto.BOOL, ["batch", 2])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 2]),
         helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array(-np.inf, np.float32), "neg_inf")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def write_export(d: Path, graph: bytes | None = None) -> Path:
    d.mkdir(parents=True)
    data = policy_graph() if graph is None else graph
    (d / "policy.onnx").write_bytes(data)
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "policy": {"type": "ddqn_flat"},
                "onnx": {"file": "policy.onnx", "sha256": hashlib.sha256(data).hexdigest(), "opset": 17,
                         "inputs": [{"name": "obs", "shape": [None, 3], "dtype": "float32"},
                                    {"name": "action_mask", "shape": [None, 2], "dtype": "bool"}]},
                "observation": {"state_layout_version": LAYOUT_VERSION}, "actions": {"n": 2}, "context": {}}
    (d / MANIFEST).write_text(json.dumps(manifest))
    return d


def edit(d: Path, fn: Any) -> None:
    m = json.loads((d / MANIFEST).read_text())
    fn(m)
    (d / MANIFEST).write_text(json.dumps(m))


def refused(d: Path, match: str) -> str:
    with pytest.raises(ConfigError) as e:
        ExportedPolicy.load(d)
    msg = str(e.value)
    assert "\n" not in msg and match in msg, msg
    return msg


def test_a_hand_built_export_loads_and_acts(tmp_path: Path) -> None:
    pol = ExportedPolicy.load(write_export(tmp_path / "ok"))
    assert pol.act(np.array([1.0, 2.0, 0.0], np.float32), np.array([True, True])) == 1
    assert pol.act(np.array([1.0, 2.0, 0.0], np.float32), np.array([True, False])) == 0


@pytest.mark.parametrize("sha", ["null", "missing", "wrong", "short"])
def test_an_export_without_its_sha256_is_refused(tmp_path: Path, sha: str) -> None:
    d = write_export(tmp_path / "e")
    value = {"null": None, "wrong": "0" * 64, "short": "abc"}.get(sha)
    edit(d, lambda m: m["onnx"].pop("sha256") if sha == "missing" else m["onnx"].__setitem__("sha256", value))
    want = "does not match policy.onnx" if sha == "wrong" else "onnx.sha256"
    msg = refused(d, want)
    if sha != "wrong":
        assert "required, the 64 hex digit sha256 of policy.onnx" in msg


@pytest.mark.parametrize("where", ["absolute", "dotdot", "subdir", "symlink"])
def test_a_manifest_pointing_outside_its_directory_is_refused(tmp_path: Path, where: str) -> None:
    """The file outside is a valid ONNX graph with the manifest's digest: only its place is wrong."""
    outside = write_export(tmp_path / "outside")
    d = write_export(tmp_path / "e")
    (d / "policy.onnx").unlink()
    (d / "sub").mkdir()
    shutil.copy(outside / "policy.onnx", d / "sub" / "policy.onnx")
    name = {"absolute": str(outside / "policy.onnx"), "dotdot": "../outside/policy.onnx", "subdir": "sub/policy.onnx",
            "symlink": "link.onnx"}[where]
    if where == "symlink":
        (d / "link.onnx").symlink_to(outside / "policy.onnx")
    edit(d, lambda m: m["onnx"].__setitem__("file", name))
    want = "leads out of" if where == "symlink" else "expected the plain name of a file in"
    assert f"onnx.file {name!r}" in refused(d, want)
    with pytest.raises(ConfigError, match=want):
        read_manifest(d)  # the manifest alone is refused too (the live router reads it before anything else)


def test_a_symlink_inside_the_directory_is_followed(tmp_path: Path) -> None:
    d = write_export(tmp_path / "e")
    (d / "policy.onnx").rename(d / "v1.onnx")
    (d / "policy.onnx").symlink_to("v1.onnx")
    assert ExportedPolicy.load(d).act(np.zeros(3, np.float32), np.array([True, True])) == 0


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "pickle"])
def test_a_damaged_policy_onnx_is_one_line_naming_the_file(tmp_path: Path, damage: str) -> None:
    """With a digest that matches (recomputed by whoever damaged it): onnxruntime's parse error, as one line."""
    marker = tmp_path / "ran"
    good = policy_graph()
    data = {"empty": b"", "truncated": good[: len(good) // 2], "garbage": bytes(range(256)) * 4,
            "pickle": pickle.dumps(Payload(marker))}[damage]
    d = write_export(tmp_path / "e", data)
    refused(d, f"{d / 'policy.onnx'}: not a valid ONNX model (")
    assert not marker.exists()


def test_a_graph_with_external_data_outside_the_export_is_refused(tmp_path: Path) -> None:
    """An initializer stored "beside" the model is read only from inside the export directory."""
    (tmp_path / "secret.bin").write_bytes(np.ones(6, np.float32).tobytes())
    model = onnx.load_from_string(policy_graph())
    w = model.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", "24")):
        w.external_data.add(key=k, value=v)
    d = write_export(tmp_path / "e", model.SerializeToString())
    refused(d, "not a valid ONNX model")


def test_names_in_a_manifest_are_registry_names_never_imports(tmp_path: Path) -> None:
    """A manifest naming ``subprocess:call`` as its predictor or observation builder is refused: names are looked
    up in llmsim's registries, never imported and called."""
    marker = tmp_path / "ran"
    call = {"kind": "subprocess:call", "args": ["touch", str(marker)]}
    actions = ActionSpec("instance", 2, True, False, ((0,), (1,)), None).to_dict()
    good_ctx = {"instance_models": ["m"], "models": ["m"], "predictor": "oracle"}
    for section, m in [("context", {"actions": actions, "context": {**good_ctx, "predictor": call},
                                    "observation": {"builder": {"kind": "flat"}}}),
                       ("observation.builder", {"actions": actions, "context": good_ctx,
                                                "observation": {"builder": call}})]:
        with pytest.raises(ConfigError, match=f"manifest.json: {section}: .*subprocess:call"):
            from_manifest(tmp_path, m, 0)
    with pytest.raises(ConfigError, match="manifest.json: actions is malformed"):
        from_manifest(tmp_path, {"actions": {"kind": "instance"}}, 0)
    assert not marker.exists()


# ---------------------------------------------------------------------------- saved predictors
def _pickle_beside(meta_path: Path, name: str, marker: Path) -> str:
    """A pickle that would create ``marker``, written beside ``meta_path`` as ``name``; returns its sha256 (so a
    check of the digest alone would let it through)."""
    data = pickle.dumps(Payload(marker))
    (meta_path.parent / name).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def length_predictor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("xgboost")
    bp, _ = train_predictor(None, 400, seed=0, model="xgboost")
    return bp.save(tmp_path_factory.mktemp("lp") / "p.json")[0]


@pytest.mark.parametrize("case", ["sklearn_pickle", "pickle_named_ubj", "joblib_suffix"])
def test_a_crafted_length_predictor_is_refused_and_never_runs(length_predictor: Path, tmp_path: Path,
                                                               case: str) -> None:
    marker = tmp_path / "ran"
    p = tmp_path / "p.json"
    meta = json.loads(length_predictor.read_text())
    name = {"sklearn_pickle": "p.model.joblib", "pickle_named_ubj": "p.model.ubj", "joblib_suffix": "p.pkl"}[case]
    meta.update(model_file=name, model_sha256=_pickle_beside(p, name, marker))
    if case == "sklearn_pickle":
        meta["kind"] = "sklearn"
    p.write_text(json.dumps(meta))
    want = {"sklearn_pickle": "kind 'sklearn' is not loaded", "pickle_named_ubj": "not a readable xgboost model",
            "joblib_suffix": "model_file: the name of an xgboost model file"}[case]
    with pytest.raises(ConfigError, match=want) as e:
        make_agent_predictor({"kind": "learned", "path": str(p)})  # what a config's predictor.path does
    assert "\n" not in str(e.value)
    assert not marker.exists()


def test_a_crafted_qos_predictor_is_refused_and_never_runs(tmp_path: Path) -> None:
    pytest.importorskip("xgboost")
    marker = tmp_path / "ran"
    model, _ = train_qos_predictor(["alpaca-native", "mpt-7b-instruct"], samples=300, seed=0)
    p = model.save(tmp_path)[0]
    meta = json.loads(p.read_text())
    fitted = [t for t, tm in meta["targets"].items() if tm["kind"] == "xgboost"]
    assert fitted
    for name in ("evil.ubj", "evil.joblib"):
        tm = meta["targets"][fitted[0]]
        tm.update(model_file=name, model_sha256=_pickle_beside(p, name, marker))
        p.write_text(json.dumps(meta))
        with pytest.raises(ConfigError, match="not a readable xgboost model" if name.endswith(".ubj")
                           else "an xgboost .ubj or .json"):
            QoSBucketModel.load(p)
    assert not marker.exists()
