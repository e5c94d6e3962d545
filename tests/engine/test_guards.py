"""Termination guards of the engine loop: a batch policy that stalls, a step time that would not move time
forward, or a request length that is not a length each end in one clear LLMSimError within a second,
instead of a hang, time running backwards or requests silently lost."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim import EngineConfig
from llmsim.engine.guards import MAX_RESCHEDULES, MAX_STALLED_ITERATIONS
from llmsim.engine.instance import Instance
from llmsim.engine.scheduling import BatchPolicy, Scheduled, VllmV0Policy
from llmsim.errors import LLMSimError
from llmsim.event_loop import ARRIVAL, SimEnv
from llmsim.metrics.recorder import Recorder
from llmsim.request import Request
from llmsim.testing import LinearProfile

PROF = LinearProfile(base=0.01, per_token=0.001)
pytestmark = pytest.mark.timeout(20)


def make(policy: type[BatchPolicy] | None = None, profile=PROF, t0: float = 0.0, **engine) -> tuple[SimEnv, Instance]:
    env = SimEnv(t0)
    inst = Instance(0, env, profile, EngineConfig(**engine), Recorder(), name="i0")
    if policy is not None:
        inst.policy = policy()
    return env, inst


def run(env: SimEnv, inst: Instance, reqs: list[Request], max_events: int = 100_000) -> int:
    """Submit ``reqs`` at their arrivals and step until nothing is left; returns the events it took (a bound on
    them, not on wall time, says the loop ends)."""
    for r in reqs:
        env.call_at(r.arrival, ARRIVAL, lambda r=r: inst.submit(r, env.now, ARRIVAL))
    events = 0
    while env.num_pending:
        env.step()
        events += 1
        assert events < max_events, "the engine loop does not end"
    return events


def expect_error(env, inst, reqs, match: str) -> None:
    """The guard raises at once: within a few thousand events (the guards' bounds), not after a long loop."""
    with pytest.raises(LLMSimError, match=match):
        run(env, inst, reqs, max_events=5_000)


# ---------------------------------------------------------------------------------------------- policies
class Nothing(BatchPolicy):
    """Never schedules anything."""

    name = "test_nothing"

    def schedule(self, inst, now):
        return Scheduled()


class AdmitThenIdle(VllmV0Policy):
    """Admits and prefills like vLLM V0, then never schedules its running requests."""

    name = "test_admit_then_idle"

    def schedule(self, inst, now):
        return super().schedule(inst, now) if inst.waiting else Scheduled()


class ZeroTokens(BatchPolicy):
    """Runs every request with no token to compute: iterations take time and make no progress."""

    name = "test_zero_tokens"

    def schedule(self, inst, now):
        for r in list(inst.waiting):
            inst.admit(r, 0, 0, now)
        for r in inst.running:
            r.n_new = 0
        return Scheduled(batch=list(inst.running))


class Overshoot(BatchPolicy):
    """Schedules more tokens than a request has left to compute."""

    name = "test_overshoot"

    def schedule(self, inst, now):
        for r in list(inst.waiting):
            inst.admit(r, r.prompt_tokens + 5, inst.kv.needed(r, r.prompt_tokens + 5), now)
        return Scheduled(batch=list(inst.running))


class PreemptForever(BatchPolicy):
    """Admits the head and preempts it again in the same call, forever."""

    name = "test_preempt_forever"

    def schedule(self, inst, now):
        r = inst.waiting[0]
        inst.admit(r, r.prompt_tokens, inst.kv.needed(r, r.prompt_tokens), now)
        inst.preempt_last()
        return Scheduled()


# ---------------------------------------------------------------------------------------------- tests
def test_a_policy_that_never_schedules_is_an_error_not_a_silent_drop():
    env, inst = make(Nothing)
    expect_error(env, inst, [Request(0, 0.0, 100, 5)],
                 r"instance i0: batch policy 'test_nothing' scheduled nothing at t=0.0 on an idle instance .* "
                 r"request 0 .* fits")


def test_a_policy_that_idles_with_running_requests_is_an_error():
    env, inst = make(AdmitThenIdle)
    expect_error(env, inst, [Request(0, 0.0, 100, 5)],
                 r"instance i0: batch policy 'test_admit_then_idle' scheduled nothing at t=0.11.* while 1 request\(s\) "
                 "are running")


def test_iterations_without_progress_end_in_an_error():
    env, inst = make(ZeroTokens)
    expect_error(env, inst, [Request(0, 0.0, 100, 5)],
                 f"instance i0: no progress after {MAX_STALLED_ITERATIONS} iterations at t=.*: batch policy "
                 "'test_zero_tokens' keeps scheduling 1 request")
    assert inst.iterations == MAX_STALLED_ITERATIONS - 1


def test_a_zero_token_iteration_that_samples_is_progress():
    # a zero-length prompt computes nothing and samples its first token: not a stall
    env, inst = make(ZeroTokens)
    r = Request(0, 0.0, 0, 1)
    run(env, inst, [r])
    assert r.generated == 1 and r.finish == pytest.approx(0.01)


def test_scheduling_past_the_context_is_an_error():
    env, inst = make(Overshoot)
    expect_error(env, inst, [Request(0, 0.0, 100, 5)],
                 r"instance i0: batch policy 'test_overshoot' scheduled request 0 for 105 token\(s\) with 0 of 100 "
                 "computed; expected 0 <= n_new <= the tokens left")


def test_preempting_without_ever_scheduling_is_an_error():
    env, inst = make(PreemptForever)
    expect_error(env, inst, [Request(0, 0.0, 100, 5)],
                 f"no progress after {MAX_RESCHEDULES + 1} schedule\\(\\) calls at t=0.0: batch policy "
                 "'test_preempt_forever' keeps preempting")


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(("profile", "why"), [
    (LinearProfile(base=float("nan")), "step time nan"),
    (LinearProfile(base=float("inf")), "step time inf"),
    (LinearProfile(base=-1.0), "step time -0.9"),
    (LinearProfile(base=0.0, per_token=0.0), "step time 0.0"),
])
def test_a_step_time_that_does_not_move_time_forward_is_an_error(profile, why, fast):
    env, inst = make(profile=profile, fast_path=fast)
    expect_error(env, inst, [Request(0, 0.0, 100, 5)],
                 f"instance i0: {why}.* s at t=0.0 for a batch of 1 request.*expected a finite duration > 0")
    assert env.now == 0.0


@pytest.mark.parametrize("fast", [True, False])
def test_a_decode_step_that_turns_negative_mid_run_is_an_error(fast):
    # decode step = 0.011 - 1e-4 * context: positive up to context 109, not from 110 on (time would stand
    # still, then run backwards); the fast path finds it while planning, stepping when it gets there
    env, inst = make(profile=LinearProfile(base=0.01, per_token=0.001, per_ctx=-1e-4), fast_path=fast)
    expect_error(env, inst, [Request(0, 0.0, 100, 50)], "instance i0: step time .* for a decode batch of 1"
                 if fast else "instance i0: step time .* for a batch of 1 request")
    assert 0.11 <= env.now < 0.2  # it stopped where the step went bad, time never ran backwards


def test_a_step_lost_in_rounding_is_an_error():
    env, inst = make(t0=1e20)
    expect_error(env, inst, [Request(0, 1e20, 100, 5)], "step time 0.11 s at t=1e.20 .* lost in rounding")


@pytest.mark.parametrize("prompt", [-5, float("nan"), 12.5, True, "100"])
def test_a_prompt_that_is_not_a_length_is_an_error(prompt):
    env, inst = make()
    expect_error(env, inst, [Request(3, 0.0, prompt, 5)],
                 f"instance i0: request 3 has prompt_tokens {prompt!r}; expected an integer >= 0")
    assert env.now == 0.0 and inst.iterations == 0


def test_numpy_integer_lengths_are_served():
    env, inst = make()
    r = Request(0, 0.0, np.int64(100), 5)
    run(env, inst, [r])
    assert r.generated == 5 and r.finish == pytest.approx(0.11 + 4 * 0.011)


def test_a_request_the_engine_can_never_start_is_still_dropped_by_reason():
    # submitted straight to the engine (the cluster would have dropped it first): 80 tokens need 5 blocks of
    # a 4-block cache; the next request is served
    env, inst = make(num_gpu_blocks=4)
    ok = Request(1, 0.0, 10, 3)
    run(env, inst, [Request(0, 0.0, 80, 5), ok])
    assert [(d[0], d[4]) for d in inst.recorder.dropped] == [(0, "cannot_be_scheduled")]
    assert ok.generated == 3 and inst.kv.free == inst.kv.total
