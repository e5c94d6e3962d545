"""BestEffort's regime ("Learned Best-Effort LLM Serving", Sec. 4.3.1): the static baselines' deadline curves bend
where the paper's do. Small runs of the calibration command's own jobs (experiments.testbeds.cases); the full curves are
``python -m experiments.testbeds.calibrate --testbed best_effort`` (docs/testbeds.md)."""

import numpy as np

from experiments.testbeds.cases import Job, run_job
from llmsim.envs.tasks import BEST_EFFORT_MAX_TOKENS, best_effort_mixture


def _met(model: str, rate: float, n: int = 300, gpus: int = 4) -> float:
    return run_job(Job("best_effort", f"static_{model}", 0, n, rate, gpus))["deadline_met_frac"]


def test_static_large_model_is_near_peak_at_one_request_per_second_only():
    assert _met("opt-6.7b", 1.0) >= 0.95
    assert _met("opt-6.7b", 6.0) < 0.5


def test_static_mid_model_holds_far_beyond_and_small_model_at_the_top_rate():
    assert _met("opt-1.3b", 16.0) >= 0.95
    assert _met("opt-125m", 48.0) >= 0.95


def test_requests_generate_the_limit_on_every_size():
    reqs = best_effort_mixture().sample(np.random.default_rng(0), np.arange(100) * 0.1)
    assert {o for r in reqs for o in r.outputs_by_model.values()} == {BEST_EFFORT_MAX_TOKENS}
    assert max(r.prompt_tokens for r in reqs) <= 512
