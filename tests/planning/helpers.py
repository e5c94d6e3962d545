"""What the planning tests share: the default llmsim config as a plain dict, per-group overrides."""

from __future__ import annotations

import yaml

from llmsim.resources import conf_dir


def compose(**over) -> dict:
    """The default llmsim config (conf/config.yaml's groups) as a plain dict, with overrides per group."""
    d = conf_dir()
    cfg = {
        "cluster": yaml.safe_load((d / "cluster" / "single_a100.yaml").read_text()),
        "engine": yaml.safe_load((d / "engine" / "vllm_v0.yaml").read_text()),
        "workload": yaml.safe_load((d / "workload" / "synthetic.yaml").read_text()),
        "policy": {"name": "round_robin", "kwargs": {}},
        "slo": {"ttft_ms": 2000, "tpot_ms": 100, "e2el_ms": None},
    }
    cfg.update(over)
    return cfg
