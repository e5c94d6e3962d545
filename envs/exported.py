"""A trained router exported by ``llmsim-export`` (agents/export.py), run with numpy + onnxruntime only.

An export directory holds ``policy.onnx`` and ``manifest.json`` (docs/export.md). The ONNX graph takes the
observation arrays and the action mask and returns the masked scores (Q-values or logits; invalid actions at
-inf unless no action is valid) and their argmax: the greedy action, with the first index winning ties, as
``torch.argmax`` does in :class:`llmsim.agents.checkpoint.QPolicy`. Loading needs no torch, stable-baselines3 or
``agents`` code, so a serving process stays small; the manifest says how to rebuild the observation
(envs/policy_router.py does it with the envs' own builders).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
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
_ORT_TYPES = {"tensor(float)": "float32", "tensor(int8)": "int8", "tensor(bool)": "bool", "tensor(int64)": "int64"}


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of export directory ``path``, checked for format, files and the ClusterState layout."""
    d = Path(path)
    f = d / MANIFEST
    if not f.is_file():
        raise ConfigError(f"{d}: not a policy export (no {MANIFEST}; llmsim-export checkpoint=DIR writes one)")
    m = load_json_file(f)
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ConfigError(f"{f}: format {m.get('format') if isinstance(m, dict) else None!r}, expected {FORMAT!r}")
    if m.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"{f}: format_version {m.get('format_version')!r}, this llmsim reads {FORMAT_VERSION}")
    for key in ("onnx", "observation", "actions", "context", "policy"):
        if not isinstance(m.get(key), dict):
            raise ConfigError(f"{f}: key {key!r} missing or not a mapping")
    have = m["observation"].get("state_layout_version")
    if have != LAYOUT_VERSION:
        raise ConfigError(f"{f}: observation.state_layout_version {have!r} (the export's ClusterState layout), "
                          f"but this llmsim's llmsim.state.cluster_state.LAYOUT_VERSION is {LAYOUT_VERSION}")
    onnx_file = d / str(m["onnx"].get("file", ""))
    if not m["onnx"].get("file") or not onnx_file.is_file():
        raise ConfigError(f"{f}: onnx.file {m['onnx'].get('file')!r} is not a file in {d}")
    want = m["onnx"].get("sha256")
    if want and file_sha256(onnx_file) != want:
        raise ConfigError(f"{f}: onnx.sha256 {want[:12]}... does not match {onnx_file.name} (file changed?)")
    return m


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

        d = Path(path)
        m = read_manifest(d)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(str(d / m["onnx"]["file"]), opts, providers=["CPUExecutionProvider"])
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
