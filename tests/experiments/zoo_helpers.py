"""A tiny fake router zoo in a temporary directory, with the public API of llmsim.agents.zoo (names, entry,
ZOO_DIR), for the experiments' tests: the quick reproduction and the report from the zoo."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from llmsim.errors import ConfigError

TRAIN_COMMAND = "llmsim-train +experiment=workload_router_transfer seed=7"


@dataclass(frozen=True)
class FakeEntry:
    """The fields of llmsim.agents.zoo.ZooEntry."""

    name: str
    testbed: str
    dir: Path
    checkpoint_dir: Path
    export_dir: Path | None
    manifest: dict[str, Any]
    suite_json: Path | None


def manifest(name: str, testbed: str, steps: int = 400) -> dict[str, Any]:
    """A manifest with llmsim.agents.zoo's keys (MANIFEST_KEYS)."""
    evaluation = {"step": 200, "score": 3.2, "warnings": []}
    return {"name": name, "label": f"{name}_zoo", "testbed": testbed, "agent": "ddqn", "train_command": TRAIN_COMMAND,
            "train_seed": 7, "steps": steps, "best_at_step": 200, "wall_s": 1500.0, "cpu_s": 2900.0,
            "commit": "abc1234def", "date": "2026-11-29", "env_config_sha256": "0123abcd" * 8,
            "validation": {"eval_metric": "gain_vs_guide", "best_score": 3.2, "evaluations": [evaluation]},
            "suite": {"size": "quick", "seeds": [2000, 2001], "scenarios": 3,
                      "bars": {name: [{"bar": "mean E2E within 2 %", "verdict": "holds"}]}},
            "notes": "a fake zoo router for the tests"}


def fake_zoo(root: Path, routers: dict[str, tuple[str, Path | None]]) -> SimpleNamespace:
    """A zoo under ``root``: name -> (testbed, checkpoint directory to copy, or None for an entry without one)."""
    entries = {}
    for name, (testbed, ckpt) in routers.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        if ckpt is not None:
            shutil.copytree(ckpt, d / "checkpoint", dirs_exist_ok=True)
        suite = d / "suite.json"
        suite.write_text(json.dumps({"scenarios": []}))
        entries[name] = FakeEntry(name, testbed, d, d / "checkpoint", None, manifest(name, testbed), suite)

    def entry(name: str) -> FakeEntry:
        if name not in entries:
            raise ConfigError(f"zoo: unknown router {name!r}; known: {', '.join(sorted(entries))}")
        return entries[name]

    return SimpleNamespace(ZOO_DIR=root, names=lambda: sorted(entries), entry=entry)
