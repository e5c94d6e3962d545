"""Every command in the README's code blocks runs as written (with small sizes), so the README cannot rot.

Each ```bash line that starts a command is matched by exactly one rule below: run (with size-limiting
overrides appended) or skipped with a stated reason. A new README command that no rule covers fails the test.
Each ```python block is executed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, shared_present

README = (REPO / "README.md").read_text()
SMALL = ["++workload.max_requests=60", "output.plots=false"]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _commands() -> list[str]:
    out = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = re.split(r"\s{2,}#", line)[0].strip()  # trailing "  # comment"
            if line and not line.startswith("#"):
                out.append(line)
    return out


# (pattern, action, reason): action "run" runs the line as a command (after substitutions), "skip" does not.
RULES: list[tuple[str, str, str]] = [
    (r"^python3\.11 -m venv ", "skip", "creates a venv and installs the package: CI runs exactly this (.ci/run)"),
    (r"^(llmsim|python -m llmsim) -m ", "run", "Hydra multirun, small sizes"),
    (r"^(llmsim|python -m llmsim)( (?!-m )|$)", "run", "one simulation, small sizes"),
    (r"^(llmsim-capacity|python -m llmsim\.cli\.planning capacity)( |$)", "run", "capacity search, tiny budget"),
    (r"^python -m llmsim\.cli\.report ", "run", "report of the multirun above"),
    (r"^(llmsim-train|python -m llmsim\.agents\.train)( |$)", "run", "a few hundred training steps on 40 requests"),
    (r"^(llmsim-evaluate|python -m llmsim\.agents\.evaluate)( |$)", "run", "the checkpoint trained above, one seed"),
    (r"^(llmsim-reproduce|python -m experiments\.reproduce)( |$)", "run", "LLMSIM_REPRODUCE_SIZE=tiny"),
    (r"^(llmsim-export|python -m llmsim\.agents\.export)( |$)", "run", "exports the checkpoint trained above"),
    (r"^llmsim-router ", "skip", "starts a server: tests/serving/test_docs_flow.py runs docs/serving.md's whole flow"),
]
TRAIN_SMALL = ["env.num_requests=40", "trainer.total_steps=300", "trainer.eval_every=0", "trainer.eval_seeds=[500]",
               "agent.learning_starts=100", "agent.batch_size=32", "trainer.progress=false"]
AGENT_APPS = {"llmsim-train": "llmsim.agents.train", "llmsim-evaluate": "llmsim.agents.evaluate",
              "llmsim-reproduce": "experiments.reproduce", "llmsim-export": "llmsim.agents.export"}


def _rule(cmd: str) -> tuple[str, str, str]:
    hits = [r for r in RULES if re.search(r[0], cmd)]
    assert len(hits) == 1, f"README command {cmd!r} matches {len(hits)} rules; add exactly one to RULES"
    return hits[0]


def test_every_command_has_a_rule() -> None:
    for cmd in _commands():
        _rule(cmd)


def _argv(cmd: str, tmp: Path, state: dict) -> list[str] | None:
    args = shlex.split(cmd)
    head = args[0]
    if head == "llmsim-reproduce":  # the installed launcher, which finds the checkout's experiments/ from anywhere
        return [str(Path(sys.executable).parent / head), *args[1:], "--out", str(tmp / "reproduce"), "--no-progress"]
    if head in AGENT_APPS:
        return _agent_argv([sys.executable, "-m", AGENT_APPS[head], *args[1:]], tmp, state)
    if head.startswith("llmsim"):
        app = ["llmsim.cli.planning", "capacity"] if head == "llmsim-capacity" else ["llmsim"]
        args = [sys.executable, "-m", *app, *args[1:]]
    elif head == "python":
        args = [sys.executable, *args[1:]]
    mod = args[2] if len(args) > 2 and args[1] == "-m" else ""
    if mod in AGENT_APPS.values():
        return _agent_argv(args, tmp, state)
    if mod == "llmsim":
        if any(a.startswith(("workload=azure", "workload=mooncake")) for a in args) and not shared_present():
            return None  # the trace lives in ../shared, absent outside the dev/CI workspace
        if "-m" in args[3:]:
            state["sweep"] = tmp / "sweep"
            return [*args, "++workload.num_requests=60", "output.plots=false", f"hydra.sweep.dir={state['sweep']}"]
        return [*args, *SMALL, f"hydra.run.dir={tmp}/run"]
    if mod == "llmsim.cli.planning":
        return [*args, "capacity.seeds=1", "capacity.num_requests=60", "capacity.tolerance=0.5",
                "capacity.max_evaluations=6", f"hydra.run.dir={tmp}/cap"]
    if mod == "llmsim.cli.report":
        return [*args[:3], str(state["sweep"]), *args[4:]]
    return args


def _agent_argv(args: list[str], tmp: Path, state: dict) -> list[str]:
    """Training / evaluation / reproduction with tiny sizes; ``outputs/train/<date>/<time>`` is the first run."""
    args = [a.replace("outputs/train/<date>/<time>", str(state.get("train", tmp / "missing"))) for a in args]
    mod = args[2]
    if mod == "llmsim.agents.train":
        state["n_train"] = n = state.get("n_train", 0) + 1
        run = tmp / f"train{n}"
        state.setdefault("train", run)
        return [*args, *TRAIN_SMALL, f"hydra.run.dir={run}"]
    if mod == "llmsim.agents.export":
        return [*args, f"hydra.run.dir={tmp}/export"]
    if mod == "llmsim.agents.evaluate":
        return [*args, "env.num_requests=40", "seeds=[1000]", "baselines=[round_robin]", "progress=false",
                "jobs=1", f"hydra.run.dir={tmp}/evaluate"]
    return [*args, "--out", str(tmp / "reproduce"), "--no-progress"]


def test_readme_commands_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLMSIM_REPRODUCE_SIZE", "tiny")
    state: dict = {}
    ran = 0
    for cmd in _commands():
        _, action, _ = _rule(cmd)
        if action == "skip":
            continue
        argv = _argv(cmd, tmp_path, state)
        if argv is None:
            continue
        p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"README command {cmd!r} failed ({p.returncode}):\n{p.stderr[-3000:]}"
        ran += 1
    assert ran >= 5


@pytest.mark.parametrize("k", range(len(_blocks("python"))))
def test_readme_python_blocks_run(k: int, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(_blocks("python")[k], f"README.md python block {k}", "exec"), {})  # noqa: S102
