"""The model-selection features (envs/observations/model_select.py): the per-model batch sizes equal a float32
sum over the replicas, whether summed as integers (power-of-two scale) or one by one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from llmsim.envs.observations.model_select import ModelSelectObs  # noqa: E402


def _env(models: list[int]):
    return SimpleNamespace(num_instances=len(models), models=sorted(set(models)), task_names=["a", "b"],
                           inst_model_idx=np.array(models, dtype=np.int64))


@pytest.mark.parametrize("scale", [64.0, 48.0, 3.0])
@pytest.mark.parametrize("per_replica", [False, True])
def test_batch_sizes_are_the_float32_sums(scale, per_replica):
    models = [0, 1, 0, 2, 1, 0]
    env = _env(models)
    obs = ModelSelectObs(per_replica=per_replica, batch_scale=scale)
    obs.bind(env)
    obs.reset(env)
    rng = np.random.default_rng(3)
    for _ in range(20):
        counts = rng.integers(0, 300, size=(len(models), 3))
        insts = [SimpleNamespace(num_running=int(r), num_waiting=int(w), num_swapped=int(s)) for r, w, s in counts]
        out = obs.build(env, SimpleNamespace(instances=insts), SimpleNamespace(task="b", arrival=0.0, extra=None))
        ref = np.zeros(len(models) if per_replica else 3, np.float32)
        for k, (r, w, s) in enumerate(counts):
            ref[k if per_replica else models[k]] += (int(r) + int(w) + int(s)) / scale  # one float32 add at a time
        assert out[:2].tolist() == [0.0, 1.0]
        assert out[2:-1].tobytes() == ref.tobytes()
