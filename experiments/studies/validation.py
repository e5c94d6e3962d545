"""What the choice studies (guide_choice, load_gate) share: validation seeds only, and a testbed's suite scenarios
that are drawn from a seed, built as the suite builds them (conf/env/<testbed>.yaml, the suite's ``base``, the
scenario's ``env``). Its trace windows are test data whatever the seed, so a study never runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmsim.agents.suite_config import SuiteFile, chosen_scenarios, load_suite_file, merge, trace_files
from llmsim.errors import load_yaml_file
from llmsim.resources import conf_dir

VALIDATION_SEEDS = range(1000, 2000)


def check_validation_seeds(seeds: list[int]) -> None:
    """Refuse any seed outside 1000-1999: test seeds report a choice, they never make it."""
    if any(s not in VALIDATION_SEEDS for s in seeds):
        raise SystemExit(f"--seeds {seeds}: validation seeds only (1000-1999); test seeds report the choice")


def testbed_env(testbed: str, suite: SuiteFile) -> dict[str, Any]:
    """The testbed's env config with the suite's ``base`` on top."""
    return merge(load_yaml_file(conf_dir() / "env" / f"{testbed}.yaml"), suite.base)


def seed_drawn(testbed: str, names: list[str] | None = None, requests: int | None = None) -> dict[str, dict[str, Any]]:
    """name -> full env config of each seed-drawn scenario (all, or ``names``: a trace window is refused);
    ``requests`` per episode, scaled as the suite scales them (None: the env's own)."""
    suite = load_suite_file(testbed)
    base, out = testbed_env(testbed, suite), {}
    for name, sc in chosen_scenarios(suite, names).items():
        if sc.trace:
            if names is not None:
                raise SystemExit(f"--scenarios: {name!r} is a trace window (test data only)")
            continue
        env = merge(base, sc.env)
        if requests is not None:
            env["num_requests"] = max(1, round(requests * sc.requests_scale))
        out[name] = env
    return out


def suite_traces(testbed: str) -> set[str]:
    """The file names of the traces the suite's windows read (test data)."""
    return {Path(f).name for sc in load_suite_file(testbed).scenarios.values() if sc.trace
            for f in trace_files(sc.env)}
