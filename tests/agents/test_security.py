"""Nothing in a checkpoint runs code: crafted trainer.pt, q_net.pt, policy.pt and replay.npz files are refused with
one line, and the payload they carry never runs (the marker file it would write does not exist).

Also: what trainer.pt holds (tensors and plain containers, agents/checkpoint_files.py) round-trips through the
weights-only loader exactly, so resuming restores the agent bit for bit.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.buffer import ReplayBuffer  # noqa: E402
from llmsim.agents.checkpoint import CheckpointPolicy, load_policy_net  # noqa: E402
from llmsim.agents.checkpoint_files import (  # noqa: E402
    TRAINER_FILE,
    load_replay,
    plain,
    read_tensors,
    read_trainer_state,
)
from llmsim.agents.train import TrainingRun, train  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from tests.agents.helpers import small_ddqn_config as _cfg  # noqa: E402


class Payload:
    """Unpickled, this would create ``marker`` (``open(marker, "w")``): proof that a file ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained")
    meta = train(_cfg(), run)
    assert meta["updates"] > 0
    return run


@pytest.fixture
def ckpt(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of the trained last/ checkpoint the test may damage."""
    d = tmp_path / "last"
    d.mkdir()
    for f in (run_dir / "last").iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    return d


def _refused(fn, match: str) -> str:
    with pytest.raises(ConfigError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg and match in msg, msg
    return msg


@pytest.mark.parametrize("writer", ["torch_save", "raw_pickle"])
def test_a_crafted_trainer_pt_is_refused_and_never_runs(ckpt: Path, tmp_path: Path, writer: str) -> None:
    marker = tmp_path / "ran"
    if writer == "torch_save":  # the zip container torch.save writes, with a payload inside the state
        torch.save({"agent": {"opt": Payload(marker)}, "loop": {}, "history": []}, ckpt / TRAINER_FILE)
    else:  # a plain pickle stream where a torch file is expected
        (ckpt / TRAINER_FILE).write_bytes(pickle.dumps({"agent": Payload(marker)}))
    msg = _refused(lambda: train(_cfg(400, resume=str(ckpt)), tmp_path / "resumed"),
                   f"{ckpt / TRAINER_FILE}: refused: it holds objects other than tensors and plain containers")
    assert "weights-only" in msg
    assert not marker.exists()


@pytest.mark.parametrize("loader", ["checkpoint_policy", "load_policy_net", "init_from"])
def test_crafted_weights_are_refused_and_never_run(ckpt: Path, tmp_path: Path, loader: str) -> None:
    marker = tmp_path / "ran"
    torch.save({"net.0.weight": Payload(marker)}, ckpt / "q_net.pt")
    fn = {"checkpoint_policy": lambda: CheckpointPolicy(ckpt),
          "load_policy_net": lambda: load_policy_net(ckpt),
          "init_from": lambda: train(_cfg(100, init_from=str(ckpt), save_replay=False), tmp_path / "ft")}[loader]
    _refused(fn, f"{ckpt / 'q_net.pt'}: refused")
    assert not marker.exists()


def test_a_crafted_replay_is_refused_and_never_runs(ckpt: Path, tmp_path: Path) -> None:
    """An object array in replay.npz is a pickle: np.load(allow_pickle=False) refuses it."""
    marker = tmp_path / "ran"
    arrays = dict(np.load(ckpt / "replay.npz"))
    arrays["obs"] = np.array([Payload(marker)], dtype=object)
    np.savez(ckpt / "replay.npz", **arrays)
    rb = ReplayBuffer(2000, 1, 27, 6)
    _refused(lambda: load_replay(ckpt, rb), f"{ckpt / 'replay.npz'}: not a readable replay buffer")
    assert not marker.exists()


def test_damaged_checkpoint_files_are_one_line(ckpt: Path, tmp_path: Path) -> None:
    q = ckpt / "q_net.pt"
    good = q.read_bytes()
    q.write_bytes(good[: len(good) // 2])
    _refused(lambda: load_policy_net(ckpt), f"{q}: not a readable torch file (empty, truncated or corrupted?)")
    q.write_bytes(b"")
    _refused(lambda: load_policy_net(ckpt), f"{q}: not a readable torch file")
    q.write_bytes(b"hidden: [16, 16]\n")  # a file of another format (YAML) under the weights' name
    _refused(lambda: load_policy_net(ckpt), f"{q}: not a readable torch file (empty, truncated or corrupted?): not a "
                                            "torch archive (it starts with b'hidden: '; torch.save writes a zip file")
    q.unlink()
    _refused(lambda: load_policy_net(ckpt), f"{q}: missing; expected the Q-network's weights")
    q.write_bytes(good)
    (ckpt / TRAINER_FILE).write_bytes(b"")
    _refused(lambda: train(_cfg(400, resume=str(ckpt)), tmp_path / "r"), f"{ckpt / TRAINER_FILE}: not a readable")
    torch.save({"agent": {}, "loop": {"step": -1}}, ckpt / TRAINER_FILE)
    _refused(lambda: train(_cfg(400, resume=str(ckpt)), tmp_path / "r"), "does not fit this ddqn agent")
    (ckpt / "replay.npz").write_bytes(b"PK\x03\x04 not a zip")
    _refused(lambda: load_replay(ckpt, ReplayBuffer(2000, 1, 27, 6)), "not a readable replay buffer")
    np.savez(ckpt / "replay.npz", rng=np.zeros(3))
    _refused(lambda: load_replay(ckpt, ReplayBuffer(2000, 1, 27, 6)), "unknown field(s) ['rng']")


def test_a_bad_loop_record_is_one_line(run_dir: Path, ckpt: Path, tmp_path: Path) -> None:
    state = read_trainer_state(run_dir / "last", "trainer.resume")
    state["loop"]["step"] = -5
    torch.save(state, ckpt / TRAINER_FILE)
    _refused(lambda: train(_cfg(400, resume=str(ckpt)), tmp_path / "r"), "loop: expected")


def test_trainer_state_is_plain_and_resume_restores_it_exactly(run_dir: Path, tmp_path: Path) -> None:
    """trainer.pt loads weights-only; the resumed agent holds exactly the saved targets, optimiser, counters and
    RNG states (so resuming trains as it always did), and two resumes from one checkpoint train identically."""
    saved = read_tensors(run_dir / "last" / TRAINER_FILE, "trainer state")
    assert set(saved) == {"agent", "loop", "history", "resume"}  # resume: the loop's and envs' state (exact resume)
    run = TrainingRun(_cfg(600, resume=str(run_dir / "last")), tmp_path / "probe")
    got = run.agent.state_dict()
    for k in ("q_target", "opt"):
        assert torch.equal(torch.cat([t.flatten() for t in _tensors(got[k])]),
                           torch.cat([t.flatten() for t in _tensors(saved["agent"][k])])), k
    assert got["updates"] == saved["agent"]["updates"] and got["rng"] == saved["agent"]["rng"]
    assert torch.equal(got["torch_rng"], saved["agent"]["torch_rng"])
    assert vars(run.state) == saved["loop"] and run.history == saved["history"]
    assert run.rb.size > 0  # replay.npz was restored as well
    a = train(_cfg(600, resume=str(run_dir / "last")), tmp_path / "a")
    b = train(_cfg(600, resume=str(run_dir / "last")), tmp_path / "b")
    assert a["steps"] == b["steps"] >= 600 and a["updates"] == b["updates"]
    wa, wb = (torch.load(tmp_path / x / "last" / "q_net.pt", weights_only=True) for x in ("a", "b"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def _tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x.float()]
    if isinstance(x, dict):
        return [t for k in sorted(x, key=str) for t in _tensors(x[k])]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _tensors(v)]
    return []


def test_plain_refuses_what_the_weights_only_loader_would() -> None:
    out = plain({"a": np.float64(1.5), "b": [np.int64(3), (1, "x", None)], "t": torch.ones(2)})
    assert type(out["a"]) is float and type(out["b"][0]) is int and out["b"][1] == (1, "x", None)
    with pytest.raises(TypeError, match=r"trainer state.x: a ndarray is not a tensor or plain value"):
        plain({"x": np.zeros(2)})
    with pytest.raises(TypeError, match="Payload"):
        plain({"y": [Payload(Path("never"))]})


class ShellPayload:
    """Unpickled, this would run a shell command creating ``marker``: a global in a module torch blocks outright."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_blocked_module_s_global_is_named_in_the_refusal(tmp_path: Path) -> None:
    """torch words a blocked module's global differently; the refusal used to quote its preamble about PyTorch 2.6
    instead of what was refused."""
    marker = tmp_path / "ran"
    path = tmp_path / "q_net.pt"
    torch.save({"net.0.weight": ShellPayload(marker)}, path)
    msg = _refused(lambda: read_tensors(path, "weights"), f"{path}: refused")
    assert msg.endswith("(weights-only loading: unsupported GLOBAL posix.system: its module posix is blocked)"), msg
    assert not marker.exists()
