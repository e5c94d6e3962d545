"""The exported-policy router's inverse of ``decode_action`` (envs/policy_router.py ``action_of``): a heuristic's
decision (an instance, WAIT or DROP) as the action the policy's scores are read at, for the load gate's margin."""

from __future__ import annotations

import pytest

from llmsim.envs.actions import ActionSpec, decode_action
from llmsim.envs.policy_router import action_of
from llmsim.routing.base import DROP, WAIT

MODELS = ["a", "b", "a", "c"]


@pytest.mark.parametrize("kind", ["instance_drop", "model_drop"])
def test_action_of_inverts_decode_action(kind: str) -> None:
    spec = ActionSpec.build(kind, MODELS)
    assert action_of(WAIT, spec) == spec.wait_action
    assert action_of(DROP, spec) == spec.drop_action
    for d in range(len(MODELS)):
        a = action_of(d, spec)
        assert 0 <= a < spec.n_choices
        assert MODELS[decode_action(a, spec, None, lambda: [])] == MODELS[d]  # the same instance or model


def test_a_model_action_is_the_model_of_the_instance() -> None:
    spec = ActionSpec.build("model_drop", MODELS)
    assert [action_of(d, spec) for d in range(4)] == [0, 1, 0, 2]
    assert [action_of(d, ActionSpec.build("instance_drop", MODELS)) for d in range(4)] == [0, 1, 2, 3]
