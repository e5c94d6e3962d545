"""The zoo's shipped routers in the reproductions, and what a short training run says about itself.

Why: a quick reproduction cannot train a router that beats round robin in minutes on two cores (issue 38 found a
12,000-step Double DQN sending every request to one backend and nothing saying so). So the quick setting evaluates
the zoo's shipped router (llmsim.agents.zoo) for its learned claims, labelled ``zoo router <name>, trained by
`<command>```, keeps its own short training as a smoke run, and prints one line per learned policy saying what that
run learned (from its training.json: steps, gradient steps and the trainer's warnings) and what is evaluated
instead. An experiment whose testbed has no zoo router says so and evaluates its own runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsim.agents import zoo
from llmsim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# experiment -> the zoo router trained on its testbed (llmsim.agents.zoo names)
ZOO_ROUTERS = {"intelligent_router": "workload_router", "qos_edge": "qos_edge", "best_effort": "best_effort"}


@dataclass(frozen=True)
class ZooRouter:
    """A shipped router as a reproduction uses it: its checkpoint and how it was trained."""

    name: str
    checkpoint: Path
    command: str
    steps: int | None
    manifest: Mapping[str, Any]

    @property
    def label(self) -> str:
        """How every row measured on it is labelled."""
        steps = f", {self.steps:,} steps" if isinstance(self.steps, int) else ""
        return f"zoo router {self.name}, trained by `{self.command}`{steps}"


def in_repo(path: Path | str) -> str:
    """A path as the report names it: relative to the repository when inside it (never an outside directory)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return p.name


def shipped(experiment: str) -> ZooRouter | None:
    """The zoo router of ``experiment``'s testbed, or None when the zoo has none (or no checkpoint for it)."""
    name = ZOO_ROUTERS.get(experiment)
    if name is None or name not in zoo.names():
        return None
    e = zoo.entry(name)
    if not (Path(e.checkpoint_dir) / "checkpoint.json").is_file():
        return None
    m = dict(e.manifest or {})
    steps = m.get("steps")
    return ZooRouter(name, Path(e.checkpoint_dir), str(m.get("train_command") or "an unrecorded command"),
                     steps if isinstance(steps, int) else None, m)


# ---------------------------------------------------------------------- what a training run learned
def read_training(run_dir: Path) -> dict[str, Any]:
    """A run's training.json (written when the run ended)."""
    f = Path(run_dir) / "training.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{f}: not a finished training run ({type(e).__name__})") from None


def learned_nothing(meta: Mapping[str, Any]) -> str | None:
    """Why a run's best/ stands for no learning, or None: no gradient step, an untrained best/, or a last
    evaluation whose greedy policy collapsed."""
    if not meta.get("updates"):
        return "no learning happened (no gradient step)"
    if meta.get("best_untrained"):
        return "no learning happened (best/ is the untrained network)"
    last = (meta.get("evaluations") or [{}])[-1]
    collapsed = [w for w in last.get("warnings") or [] if "collapsed" in w]
    if collapsed:
        return "it did not learn to route (" + "; ".join(collapsed) + ")"
    return None


def finding(name: str, meta: Mapping[str, Any]) -> str:
    """One line: a learned policy's own run, its budget and its warnings, and whether it learned."""
    steps, updates = int(meta.get("steps") or 0), int(meta.get("updates") or 0)
    seen: list[str] = []
    for w in meta.get("warnings") or []:
        text = w.get("message") if isinstance(w, Mapping) else str(w)
        if text and text not in seen:
            seen.append(text)
    why = learned_nothing(meta)
    head = f"{name}: this run's own training, {steps:,} steps and {updates:,} gradient steps"
    if why is None:
        return f"{head}: no training warning" + (f" ({len(seen)} earlier warning(s))" if seen else "")
    return f"{head}: {why}"


def instead_of(router: ZooRouter | None, testbed: str) -> str:
    """What the learned claims measure when a run's own routers are smoke runs."""
    if router is not None:
        return f"the claims measure the {router.label} instead"
    return f"the zoo has no {testbed} router: the claims measure this run's own checkpoint"


def versus_reference(gain_pct: float | None, reference: str) -> str:
    """What a run's own checkpoint did against the reference heuristic, in a phrase."""
    if gain_pct is None:
        return f"its own checkpoint was not measured against {reference}"
    if gain_pct > 0:
        return f"its own checkpoint beats {reference} by {gain_pct:.1f} %"
    return f"its own checkpoint does not beat {reference} ({gain_pct:+.1f} %)"


def policy_lines(runs: Mapping[str, Path], instead: str,
                 versus: Mapping[str, str] | None = None) -> dict[str, str]:
    """One line per learned policy (name -> run directory): what its run learned, how its own checkpoint did
    (``versus``, a phrase per name), then ``instead`` (what the claims measure)."""
    versus = versus or {}
    return {name: "; ".join([finding(name, read_training(run)), *([versus[name]] if name in versus else []), instead])
            for name, run in runs.items()}
