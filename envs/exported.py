"""A trained router exported by ``llmsim-export`` (agents/export.py), run with numpy + onnxruntime only.

An export directory holds ``policy.onnx`` and ``manifest.json`` (docs/export.md). The ONNX graph takes the
observation arrays and the action mask and returns the masked scores (Q-values or logits; invalid actions at
-inf unless no action is valid) and their argmax: the greedy action, with the first index winning ties, as
``torch.argmax`` does in :class:`llmsim.agents.checkpoint.QPolicy`. Loading needs no torch, stable-baselines3 or
``agents`` code, so a serving process stays small; the manifest says how to rebuild the observation
(envs/policy_router.py does it with the envs' own builders).

What loading trusts: JSON (the manifest) and an ONNX graph that onnxruntime runs with its own operators; nothing
in an export is imported or unpickled. ``onnx.file`` must name a file inside the export directory and
``onnx.sha256`` must be its digest (required: a damaged or swapped file is refused, not run). Every problem is one
:class:`ConfigError` line naming the file (docs/export.md lists them).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.errors import ConfigError, load_json_file
from llmsim.state.cluster_state import LAYOUT_VERSION

FORMAT = "llmsim-policy"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MASK_INPUT = "action_mask"
OUTPUTS = ("scores", "action")
SHA256 = re.compile(r"[0-9a-f]{64}")
ZOO_PREFIX = "zoo:"  # ``zoo:<name>``: a shipped router of llmsim's zoo (docs/zoo.md) instead of a directory
ZOO_DIR = Path(str(resources.files("llmsim") / "zoo"))  # zoo/<name>/{manifest.json, checkpoint/, export/, suite.json}
_ORT_TYPES = {"tensor(float)": "float32", "tensor(int8)": "int8", "tensor(bool)": "bool", "tensor(int64)": "int64"}


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def zoo_names() -> list[str]:
    """The routers shipped in the zoo: its folders that hold a manifest.json."""
    if not ZOO_DIR.is_dir():
        return []
    return sorted(p.name for p in ZOO_DIR.iterdir() if (p / "manifest.json").is_file())


def zoo_dir(name: str) -> Path:
    """The zoo folder of router ``name``; one line listing the shipped names when there is no such router."""
    if name not in zoo_names():
        raise ConfigError(f"zoo:{name}: no such router in the zoo; shipped: {', '.join(zoo_names()) or '(none)'}")
    return ZOO_DIR / name


def resolve_zoo(path: str | Path, part: str) -> Path:
    """``path`` as a directory: ``zoo:<name>`` is that zoo router's ``part`` folder (``checkpoint`` or
    ``export``), anything else the path itself. Only names of the zoo resolve: no path goes through the prefix."""
    text = str(path)
    if not text.startswith(ZOO_PREFIX):
        return Path(path)
    d = zoo_dir(text[len(ZOO_PREFIX):])
    if not (d / part).is_dir():
        raise ConfigError(f"{text}: this zoo router ships no {part}/ folder")
    return d / part


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of export directory ``path`` (or ``zoo:<name>``), checked for format, files and the
    ClusterState layout."""
    d = resolve_zoo(path, "export")
    f = d / MANIFEST
    if not f.is_file():
        raise ConfigError(f"{d}: not a policy export (no {MANIFEST}; llmsim-export checkpoint=DIR writes one)")
    m = load_json_file(f)
    if not isinstance(m, dict):
        raise ConfigError(f"{f}: expected a JSON object (an export's description), got {json_kind(m)}")
    if m.get("format") != FORMAT:
        raise ConfigError(f"{f}: format {m.get('format')!r}, expected {FORMAT!r}")
    if m.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"{f}: format_version {m.get('format_version')!r}, this llmsim reads {FORMAT_VERSION}")
    for key in ("onnx", "observation", "actions", "context", "policy"):
        if not isinstance(m.get(key), dict):
            raise ConfigError(f"{f}: key {key!r} missing or not a mapping")
    have = m["observation"].get("state_layout_version")
    if have != LAYOUT_VERSION:
        raise ConfigError(f"{f}: observation.state_layout_version {have!r} (the export's ClusterState layout), "
                          f"but this llmsim's llmsim.state.cluster_state.LAYOUT_VERSION is {LAYOUT_VERSION}")
    onnx_path(d, m)
    check_io(f, m)
    return m


def json_kind(x: Any) -> str:
    """A parsed JSON value's kind as the file spells it (a list, a string, null ...)."""
    kinds = {bool: "a boolean", list: "a list", str: "a string", int: "a number", float: "a number"}
    return "null" if x is None else kinds.get(type(x), f"a {type(x).__name__}")


def onnx_path(d: Path, m: dict[str, Any]) -> Path:
    """The file ``onnx.file`` names: a plain file name inside export directory ``d`` (no absolute path, no ``..``,
    no symbolic link leading out of ``d``), with ``onnx.sha256`` (required) the hex digest to check it against."""
    f, name, digest = d / MANIFEST, m["onnx"].get("file"), m["onnx"].get("sha256")
    if not isinstance(name, str) or not name or name in (".", "..") or Path(name).name != name or "\\" in name:
        raise ConfigError(f"{f}: onnx.file {name!r}: expected the plain name of a file in {d} (no directory part)")
    onnx_file = d / name
    if not onnx_file.is_file():
        raise ConfigError(f"{f}: onnx.file {name!r} is not a file in {d}")
    if not onnx_file.resolve().is_relative_to(d.resolve()):
        raise ConfigError(f"{f}: onnx.file {name!r} leads out of {d} (to {onnx_file.resolve()}); expected a file "
                          "inside the export directory")
    if not isinstance(digest, str) or not SHA256.fullmatch(digest):
        raise ConfigError(f"{f}: onnx.sha256 {digest!r}: required, the 64 hex digit sha256 of {name} (llmsim-export "
                          "writes it; an export without it is refused)")
    return onnx_file


def check_io(f: Path, m: dict[str, Any]) -> None:
    """``onnx.inputs``: name, dtype (one of the graph's) and shape of each input, the action mask last."""
    inputs = m["onnx"].get("inputs")
    ok = isinstance(inputs, list) and inputs and all(
        isinstance(i, dict) and isinstance(i.get("name"), str) and i.get("dtype") in _ORT_TYPES.values()
        and isinstance(i.get("shape"), list) and len(i["shape"]) >= 1 for i in inputs)
    if not ok or inputs[-1]["name"] != MASK_INPUT:
        raise ConfigError(f"{f}: onnx.inputs: expected a list of {{name, dtype, shape}} (dtype one of "
                          f"{sorted(_ORT_TYPES.values())}) ending with {MASK_INPUT!r}")
    n = m["actions"].get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{f}: actions.n {n!r}: expected the number of actions, a positive integer")


def read_onnx(d: Path, m: dict[str, Any]) -> bytes:
    """The bytes of the export's ONNX file once their sha256 is the manifest's (read once: what is checked is what
    is loaded). The digest finds a changed or damaged file; it says nothing of who wrote the export."""
    onnx_file = onnx_path(d, m)
    data = onnx_file.read_bytes()
    if hashlib.sha256(data).hexdigest() != m["onnx"]["sha256"]:
        raise ConfigError(f"{d / MANIFEST}: onnx.sha256 {m['onnx']['sha256'][:12]}... does not match "
                          f"{onnx_file.name} (file changed?)")
    return data


class ExportedPolicy:
    """The greedy router of an export: ``act(obs, mask)`` and ``scores(obs, mask)`` for one observation.

    ``obs`` is what the env's builder returns: a float32 vector, or the graph builder's dict of arrays.
    ``threads``: onnxruntime intra-op threads (1: these graphs are tiny, and one thread is deterministic)."""

    def __init__(self, directory: Path, manifest: dict[str, Any], session: Any) -> None:
        self.directory, self.manifest, self.session = directory, manifest, session
        io = manifest["onnx"]
        self.inputs: list[dict[str, Any]] = list(io["inputs"])
        self.obs_inputs = [i for i in self.inputs if i["name"] != MASK_INPUT]
        self.dtypes = {i["name"]: np.dtype(i["dtype"]) for i in self.inputs}
        self.n_actions = int(manifest["actions"]["n"])
        self.policy_type = str(manifest["policy"].get("type"))

    @classmethod
    def load(cls, path: str | Path, threads: int = 1) -> ExportedPolicy:
        import onnxruntime as ort  # optional: the export / serve extras

        d = resolve_zoo(path, "export")
        m = read_manifest(d)
        model = read_onnx(d, m)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 4  # errors come back as one ConfigError line, not onnxruntime's log
        # a model given as bytes resolves external data against this folder: keep it to the export directory
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", str(d.resolve()))
        try:
            sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - any onnxruntime failure to load means the file is not a usable model
            raise ConfigError(f"{d / m['onnx']['file']}: not a valid ONNX model ({' '.join(str(e).split())[:300]})"
                              ) from None
        cls._check_session(d, m, sess)
        return cls(d, m, sess)

    @staticmethod
    def _check_session(d: Path, m: dict[str, Any], sess: Any) -> None:
        """The graph's inputs and outputs are the manifest's (names, dtypes, non-batch shapes)."""
        got = [(i.name, _ORT_TYPES.get(i.type, i.type), [None if isinstance(s, str) else s for s in i.shape[1:]])
               for i in sess.get_inputs()]
        want = [(i["name"], i["dtype"], list(i["shape"][1:])) for i in m["onnx"]["inputs"]]
        if got != want:
            raise ConfigError(f"{d / MANIFEST}: onnx.inputs {want} do not match {m['onnx']['file']}'s inputs {got}")
        outs = [o.name for o in sess.get_outputs()]
        if outs != list(OUTPUTS):
            raise ConfigError(f"{d / m['onnx']['file']}: outputs {outs}, expected {list(OUTPUTS)}")

    def feeds(self, obs: Any, masks: np.ndarray, batched: bool = False) -> dict[str, np.ndarray]:
        """The session inputs for one observation (or a batch with a leading axis when ``batched``)."""
        out: dict[str, np.ndarray] = {}
        if isinstance(obs, Mapping):
            for i in self.obs_inputs:
                if i["name"] not in obs:
                    raise ConfigError(f"exported policy {self.directory}: observation lacks {i['name']!r} "
                                      f"(expected keys {[x['name'] for x in self.obs_inputs]})")
                out[i["name"]] = self._arr(obs[i["name"]], i, batched)
        else:
            if len(self.obs_inputs) != 1:
                raise ConfigError(f"exported policy {self.directory}: expects a dict observation with "
                                  f"{[x['name'] for x in self.obs_inputs]}, got {type(obs).__name__}")
            out[self.obs_inputs[0]["name"]] = self._arr(obs, self.obs_inputs[0], batched)
        mask = np.asarray(masks, dtype=np.bool_)
        out[MASK_INPUT] = mask if batched else mask.reshape(1, -1)
        if out[MASK_INPUT].shape[1] != self.n_actions:
            raise ConfigError(f"exported policy {self.directory}: action mask of {out[MASK_INPUT].shape[1]} "
                              f"actions, the policy has {self.n_actions}")
        return out

    def _arr(self, x: Any, spec: dict[str, Any], batched: bool) -> np.ndarray:
        a = np.asarray(x, dtype=self.dtypes[spec["name"]])
        a = a if batched else a.reshape((1, *a.shape))
        if list(a.shape[1:]) != list(spec["shape"][1:]):
            raise ConfigError(f"exported policy {self.directory}: input {spec['name']!r} has shape "
                              f"{list(a.shape[1:])}, the policy was exported with {spec['shape'][1:]}")
        return np.ascontiguousarray(a)

    def run(self, obs: Any, masks: np.ndarray, batched: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(masked scores, greedy actions); one row each unless ``batched``."""
        scores, actions = self.session.run(list(OUTPUTS), self.feeds(obs, masks, batched))
        return (scores, actions) if batched else (scores[0], actions[0])

    def scores(self, obs: Any, mask: np.ndarray) -> np.ndarray:
        """Masked Q-values / logits of one observation (invalid actions at -inf)."""
        return self.run(obs, mask)[0]

    def act(self, obs: Any, mask: np.ndarray) -> int:
        """The greedy action: argmax of the masked scores (the first index on ties)."""
        return int(self.run(obs, mask)[1])

    def sample(self, obs: Any, mask: np.ndarray, rng: np.random.Generator) -> int:
        """An action drawn from the softmax of the masked logits (categorical SAC's stochastic policy)."""
        if self.manifest["policy"].get("sampling") != "softmax":
            raise ConfigError(f"exported policy {self.directory}: mode=sample needs a categorical SAC policy; "
                              f"a {self.policy_type} export acts greedily only")
        s = self.scores(obs, mask).astype(np.float64)
        valid = np.asarray(mask, bool) | ~np.asarray(mask, bool).any()
        p = np.where(valid, np.exp(s - s[valid].max()), 0.0)
        return int(rng.choice(len(p), p=p / p.sum()))
