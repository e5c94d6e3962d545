"""What the choice studies (guide_choice, load_gate) share: validation seeds only, and a testbed's suite scenarios
that are drawn from a seed, built as the suite builds them (conf/env/<testbed>.yaml, the suite's ``base``, the
scenario's ``env``). Its trace windows are test data whatever the seed, so a study never runs them."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmsim.agents.suite_config import SuiteFile, chosen_scenarios, load_suite_file, merge, trace_files
from llmsim.errors import ConfigError, LLMSimError, load_yaml_file
from llmsim.resources import conf_dir
from llmsim.routing import ROUTERS

VALIDATION_SEEDS = range(1000, 2000)


def validation_seed(text: str) -> int:
    """An argparse type for ``--seeds``: a seed outside 1000-1999 is refused (test seeds report a choice, they never
    make it), as argparse refuses any bad value: one line, exit 2."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if seed not in VALIDATION_SEEDS:
        raise argparse.ArgumentTypeError(f"{seed}: validation seeds only (1000-1999); test seeds report the choice")
    return seed


def router_name(text: str) -> str:
    """An argparse type for a heuristic's name (``--heuristics``, ``--router``): a registered router."""
    try:
        ROUTERS.get(text, "router")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("router: ")) from None
    return text


def name_path(text: str) -> tuple[str, str]:
    """An argparse type for ``--checkpoints NAME=PATH``: a label and a checkpoint directory (or ``zoo:<name>``)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH (a label, '=', a checkpoint directory), got {text!r}")
    return name, path


def named_paths(ap: argparse.ArgumentParser, pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The ``--checkpoints`` pairs as label -> path; a label given twice is refused (one would be dropped)."""
    names = [n for n, _ in pairs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        ap.error(f"argument --checkpoints: label(s) {twice} given twice; give each checkpoint its own NAME")
    return dict(pairs)


@contextlib.contextmanager
def usage_errors(ap: argparse.ArgumentParser) -> Iterator[None]:
    """A study's bad input (a config, trace or profile error from the scenarios, the suite, a file) ends as argparse
    ends its own, ``prog: error: ...`` and exit 2, in one line (the usage is for a bad command line)."""
    try:
        yield
    except LLMSimError as e:
        print(f"{ap.prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2) from None


def testbed_env(testbed: str, suite: SuiteFile) -> dict[str, Any]:
    """The testbed's env config with the suite's ``base`` on top."""
    return merge(load_yaml_file(conf_dir() / "env" / f"{testbed}.yaml"), suite.base)


# Validation-only scenarios that stand for the suite's conversation trace windows without reading them: ShareGPT
# conversations' (prompt, output) lengths (../shared/traces/sharegpt_lengths, its PROVENANCE.md; not a trace the
# suite reads) at Poisson rates that run the WorkloadRouter testbed's four 16 GB V100s from loaded to far past
# capacity, clipped to what one instance's 4,096-token KV cache holds.
SHAREGPT = "sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
PROXY_RATES = {"sharegpt_0.5": 0.5, "sharegpt_1": 1.0, "sharegpt_2": 2.0}


def proxy_env(name: str, base: dict[str, Any], requests: int, traces: Path) -> dict[str, Any]:
    """The env of a validation-only proxy scenario (``PROXY_RATES``) on ``base``."""
    return merge(base, {"workload": {
        "kind": "synthetic", "arrival": {"process": "poisson", "rate": PROXY_RATES[name]}, "num_requests": requests,
        "lengths": {"dist": "empirical", "path": str(traces / SHAREGPT), "prompt_max": 2048, "output_max": 2000}}})


def seed_drawn(testbed: str, names: list[str] | None = None, requests: int | None = None) -> dict[str, dict[str, Any]]:
    """name -> full env config of each seed-drawn scenario (all, or ``names``: a trace window is refused; a name of
    ``PROXY_RATES`` is a validation-only proxy read from $LLMSIM_TRACES, as the suite reads its traces, default
    ../shared/traces); ``requests`` per episode, scaled as the suite scales them (None: the env's own)."""
    suite = load_suite_file(testbed)
    base, out = testbed_env(testbed, suite), {}
    proxies = [n for n in names or () if n in PROXY_RATES]
    named = None if names is None else [n for n in names if n not in PROXY_RATES]
    for name, sc in (chosen_scenarios(suite, named) if named != [] else {}).items():
        if sc.trace:
            if names is not None:
                raise ConfigError(f"--scenarios: {name!r} is a trace window (test data only)")
            continue
        env = merge(base, sc.env)
        if requests is not None:
            env["num_requests"] = max(1, round(requests * sc.requests_scale))
        out[name] = env
    for name in proxies:
        traces = Path(os.environ.get("LLMSIM_TRACES", "../shared/traces"))
        out[name] = proxy_env(name, base, requests or int(base.get("num_requests", 2000)), traces)
    return out


def suite_traces(testbed: str) -> set[str]:
    """The file names of the traces the suite's windows read (test data)."""
    return {Path(f).name for sc in load_suite_file(testbed).scenarios.values() if sc.trace
            for f in trace_files(sc.env)}


if __name__ == "__main__":  # helpers only: running this module alone would do nothing
    raise SystemExit("python -m experiments.studies.validation: the choice studies' shared helpers, not a study; run a "
                     "study instead, e.g. python -m experiments.studies.load_gate --help")
