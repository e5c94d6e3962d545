"""What the files of a checkpoint may hold, and how each is read: nothing in a checkpoint can run code.

* ``q_net.pt`` / ``policy.pt`` / ``trainer.pt``: tensors and plain containers (dict, list, tuple, str, int, float,
  bool, None), read with ``torch.load(weights_only=True)``. Torch's weights-only unpickler rebuilds tensors and
  those containers and refuses every other object, so a crafted file is a one-line refusal, never a call.
  :func:`plain` checks what we save against the same list, so a state that could not be resumed fails when it is
  written, not when it is read back.
* ``replay.npz``: numpy arrays, read with ``np.load(allow_pickle=False)`` (an object array is refused).
* ``checkpoint.json`` and ``config.yaml``: JSON and ``yaml.safe_load`` (agents/checkpoint_meta.py, agents/export.py).

Every problem with a file (missing, truncated, corrupted, refused, of another shape) is one :class:`ConfigError`
line naming the file.
"""

from __future__ import annotations

import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from llmsim.agents.buffer import ReplayBuffer
from llmsim.errors import ConfigError

TRAINER_FILE = "trainer.pt"
REPLAY_FILE = "replay.npz"
PLAIN_TYPES = (str, int, float, bool, type(None))
TRAINER_KEYS = ("agent", "loop", "history")


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, cut to ``limit`` characters."""
    return " ".join(str(e).split())[:limit] or type(e).__name__


def refusal(e: pickle.UnpicklingError) -> str:
    """The part of torch's weights-only refusal that says what was refused ("Unsupported global: GLOBAL io.open")."""
    text = str(e).strip()
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?: was not an allowed|\n\n|$)", text, re.S)
    if found:
        return one_line(Exception(found.group(1)))
    blocked = re.search(r"unsupported GLOBAL (\S+) whose module (\S+) is blocked", text)  # os, subprocess, ...
    if blocked:
        return f"unsupported GLOBAL {blocked.group(1)}: its module {blocked.group(2)} is blocked"
    return one_line(e)


def read_tensors(path: Path, what: str) -> Any:
    """The tensors and plain containers in torch file ``path`` (weights-only: no object of the file's choosing is
    ever built); one ConfigError line when it is missing, unreadable or holds anything else."""
    if not path.is_file():
        raise ConfigError(f"{path}: missing; expected {what}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about pickle protocols it reads anyway
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ConfigError(f"{path}: refused: it holds objects other than tensors and plain containers "
                          f"(weights-only loading: {refusal(e)})") from None
    except Exception as e:  # noqa: BLE001 - any failure to parse means the file is not a torch file of ours
        reason = one_line(e).split(". ")[0]  # torch's first sentence says what failed; the rest is advice
        if isinstance(e, KeyError):  # torch's legacy reader on a file of another format: a bare byte value
            with path.open("rb") as f:
                reason = f"not a torch archive (it starts with {f.read(8)!r}; torch.save writes a zip file, b'PK...')"
        raise ConfigError(f"{path}: not a readable torch file (empty, truncated or corrupted?): {reason}") from None


def load_weights(net: nn.Module, path: Path, what: str) -> None:
    """``net``'s parameters from ``path``; a file of another shape is one line naming it."""
    state = read_tensors(path, what)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"{path}: expected a state dict of tensors ({what}), got {type(state).__name__}")
    misfit = first_misfit(state, net.state_dict())
    if misfit:
        raise ConfigError(f"{path}: does not fit the network checkpoint.json describes: {misfit}")
    net.load_state_dict(state)


def first_misfit(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> str | None:
    """The first parameter a saved state dict lacks, adds or shapes differently from a network's, in one phrase."""
    for k in sorted(set(got) | set(want)):
        if k not in got:
            return f"{k} is missing from the file"
        if k not in want:
            return f"the file has {k}, which the network does not"
        if got[k].shape != want[k].shape:
            return f"{k} is {list(got[k].shape)} in the file, {list(want[k].shape)} in the network"
    return None


def plain(x: Any, where: str = "trainer state") -> Any:
    """``x`` with numpy scalars as Python numbers; TypeError for anything the weights-only loader would refuse."""
    if isinstance(x, np.generic):  # before the plain types: np.float64 is a float, but pickles as a numpy object
        return x.item()
    if isinstance(x, (torch.Tensor, *PLAIN_TYPES)):
        return x
    if isinstance(x, dict):
        return {k: plain(v, f"{where}.{k}") for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(plain(v, f"{where}[{i}]") for i, v in enumerate(x))
    raise TypeError(f"{where}: a {type(x).__name__} is not a tensor or plain value; trainer.pt holds only those")


def save_trainer_state(directory: Path, state: dict[str, Any]) -> None:
    """``trainer.pt``: what resuming needs beyond the policy network, as tensors and plain containers."""
    torch.save(plain(state), directory / TRAINER_FILE)


def read_trainer_state(directory: Path, key: str) -> dict[str, Any]:
    """``trainer.pt`` of checkpoint ``directory``, checked for its three parts (``key``: the config key that named
    the directory, for the messages)."""
    path = directory / TRAINER_FILE
    if not path.is_file():
        raise ConfigError(f"{key}={directory}: no {TRAINER_FILE} (a checkpoint to fine-tune from: trainer.init_from)")
    state = read_tensors(path, "the trainer state saved with the checkpoint")
    if not isinstance(state, dict) or not isinstance(state.get("agent"), dict) \
            or not isinstance(state.get("loop"), dict) or not isinstance(state.get("history", []), list):
        raise ConfigError(f"{path}: expected a mapping with agent and loop mappings and a history list")
    return state


def save_replay(directory: Path, rb: ReplayBuffer) -> None:
    """``replay.npz``: the replay buffer's arrays (numeric and boolean only)."""
    np.savez(directory / REPLAY_FILE, **rb.state_dict())


def load_replay(directory: Path, rb: ReplayBuffer) -> bool:
    """Fill ``rb`` from ``replay.npz`` if the checkpoint has one (False if not); objects are refused."""
    path = directory / REPLAY_FILE
    if not path.is_file():
        return False
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{path}: not a readable replay buffer (numeric numpy arrays, no objects): "
                          f"{one_line(e)}") from None
    try:
        rb.load_state_dict(arrays)
    except ValueError as e:
        raise ConfigError(f"{path}: {one_line(e)}") from None
    return True
