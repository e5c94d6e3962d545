"""A what-if copy of an env (docs/envs.md "What-ifs for planners"): the same future as the original on the Python
engine, and one line naming the fix where the compiled engine's classes cannot be copied."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("gymnasium")

import gymnasium as gym  # noqa: E402

import llmsim.envs  # noqa: E402, F401  (registers the ids)
from llmsim.envs import routing_env  # noqa: E402
from llmsim.errors import LLMSimError  # noqa: E402
from tests.helpers import python_engine_only  # noqa: E402


def _steps(env, n: int) -> list[tuple[bytes, float]]:
    out = []
    for _ in range(n):
        obs, reward, term, trunc, _ = env.step(int(env.action_masks().argmax()))
        out.append((obs.tobytes(), float(reward)))
        if term or trunc:
            break
    return out


@python_engine_only
def test_a_copy_has_the_original_future_and_leaves_it_alone() -> None:
    env = gym.make("llmsim/Routing-v0", num_requests=40).unwrapped
    env.reset(seed=3)
    _steps(env, 10)
    twin = copy.deepcopy(env)
    assert twin.cluster is not env.cluster and twin.driver.cluster is twin.cluster
    future = _steps(twin, 500)
    assert len(future) > 10 and _steps(env, 500) == future


def test_a_copy_on_the_compiled_engine_is_one_line_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    env = gym.make("llmsim/Routing-v0", num_requests=20).unwrapped
    env.reset(seed=0)
    monkeypatch.setattr(routing_env, "engine_name", lambda: "compiled")
    with pytest.raises(LLMSimError, match=r"compiled engine cannot be copied .*llmsim\.compile clean") as e:
        copy.deepcopy(env)
    assert "\n" not in str(e.value)
