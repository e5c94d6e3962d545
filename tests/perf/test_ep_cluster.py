"""A cluster entry's ``ep`` reaches the instance's profile (expert parallelism from a cluster YAML)."""

from __future__ import annotations

import pytest

from llmsim.cluster.config import instances_from_config
from llmsim.errors import ConfigError


def test_ep_from_a_cluster_entry_prices_the_expert_split() -> None:
    one = instances_from_config({"instances": [{"model": "qwen3-30b-a3b", "gpu": "h100", "tp": 2}]})[0]
    two = instances_from_config({"instances": [{"model": "qwen3-30b-a3b", "gpu": "h100", "tp": 2, "ep": 2}]})[0]
    assert (one.ep, two.ep) == (1, 2)
    assert two.build_profile().name.endswith("-ep2") and not one.build_profile().name.endswith("-ep2")


def test_ep_must_be_a_positive_integer() -> None:
    with pytest.raises(ConfigError, match="ep"):
        instances_from_config({"instances": [{"model": "qwen3-30b-a3b", "ep": 0}]})
