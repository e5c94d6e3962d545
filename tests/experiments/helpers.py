"""What the experiments' tests share: running ``llmsim-reproduce`` as a command at the tiny size, reading its JSON;
an env stopped mid-episode at a decision, for the rollout studies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import REPO


def reproduce_cli(args: list[str], size: str = "tiny", timeout: int = 110) -> subprocess.CompletedProcess[str]:
    """``python -m experiments.reproduce ARGS`` from the repository root with ``LLMSIM_REPRODUCE_SIZE=size``."""
    env = {**os.environ, "LLMSIM_REPRODUCE_SIZE": size, "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "experiments.reproduce", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """One claim row per non-empty line of ``--json`` output."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def mid_episode(cfg: dict[str, Any], seed: int, steps: int, router: str = "least_work_left") -> tuple[Any, Any, int]:
    """An env of ``cfg`` on ``seed`` after ``steps`` steps of ``router``, the router, and its next action."""
    from llmsim.agents.env_setup import make_env
    from llmsim.routing import make_router

    env = make_env(cfg)
    env.reset(seed=seed, options={"workload_seed": seed})
    base = make_router(router, seed=seed)
    for _ in range(steps):
        env.step(env.heuristic_action(base))
    return env, base, env.heuristic_action(base)


def usage_error(main: Callable[[list[str]], Any], argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``main(argv)`` must end as argparse ends a bad command line: exit status 2, the error on stderr; its last
    line (``prog: error: ...``)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err, err
    return err[-1]
