"""Every request counts: an episode's latency statistics over all of its requests, drops and cut-offs included.

A policy that loses requests must not look fast. The llmsim summary averages completed requests only; here a request
that was dropped (by the agent, the wait fallback, an unservable route) or cut off by the episode's time limit enters
the statistics at the time it was given up: its end-to-end latency is ``give-up time - arrival``, its TTFT the same
when it never got a token. Tables rank by these all-requests figures (``mean_e2el_ms``, ``p99_ttft_ms``...); the
completed-only ones keep the ``completed_`` prefix. Pure functions over public request records and the driver's drop
record, so they can be checked on crafted requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmsim.envs.rewards.base import CUT_OFF_REASON
from llmsim.envs.rewards.best_effort import BestEffortReward, deadline_weight

PERCENTILES = (("median", 50.0), ("p90", 90.0), ("p99", 99.0))
# drop record columns (llmsim.cluster.driver.ClusterDriver.drops): id, arrival, prompt, output, reason, time, instance
DROP_ID, DROP_REASON, DROP_TIME = 0, 4, 5


def given_up(drops: Sequence[Sequence[Any]]) -> dict[int, tuple[float, str]]:
    """Request id -> (time it was given up, reason), from a drop record (the last entry of an id wins)."""
    return {int(d[DROP_ID]): (float(d[DROP_TIME]), str(d[DROP_REASON])) for d in drops}


def request_latencies(reqs: Sequence[Any], drops: Sequence[Sequence[Any]],
                      end: float) -> dict[str, np.ndarray]:
    """Per request (arrival order), in seconds over ALL requests: e2e, TTFT and router wait (arrival to routing), and
    which completed / were cut off by the time limit.

    A completed request: finish - arrival, first token - arrival. Any other: the give-up time from the drop record
    (``end``, the episode's last instant, if it has none) minus arrival; its TTFT is its real one if it got a token,
    its router wait the whole e2e if it was never routed."""
    gone = given_up(drops)
    n = len(reqs)
    e2e, ttft, wait = np.empty(n), np.empty(n), np.empty(n)
    done, cut = np.zeros(n, bool), np.zeros(n, bool)
    for i, r in enumerate(reqs):
        if r.finish >= 0 and not r.dropped:
            done[i] = True
            e2e[i] = r.finish - r.arrival
            ttft[i] = r.first_token - r.arrival
        else:
            t, reason = gone.get(int(r.id), (end, ""))
            cut[i] = reason == CUT_OFF_REASON
            e2e[i] = max(t - r.arrival, 0.0)
            ttft[i] = r.first_token - r.arrival if r.first_token >= 0 else e2e[i]
        wait[i] = r.routed_time - r.arrival if r.routed_time >= 0 else e2e[i]
    return {"e2e": e2e, "ttft": ttft, "wait": wait, "completed": done, "cut_off": cut}


def _describe(values: np.ndarray, name: str, prefix: str = "") -> dict[str, float | None]:
    """mean / median / p90 / p99 of ``values`` (seconds) in milliseconds, vllm bench serve's key names."""
    if not len(values):
        return {f"{prefix}{k}_{name}_ms": None for k in ("mean", *(p for p, _ in PERCENTILES))}
    out = {f"{prefix}mean_{name}_ms": float(values.mean() * 1e3)}
    out.update({f"{prefix}{k}_{name}_ms": float(np.percentile(values, q) * 1e3) for k, q in PERCENTILES})
    return out


def latency_stats(reqs: Sequence[Any], drops: Sequence[Sequence[Any]], end: float) -> dict[str, Any]:
    """The all-requests statistics (``mean_e2el_ms``, ``median_ttft_ms``, ..., ``router_wait_s``, ``makespan_s``:
    first arrival to the last request's end, completed or given up), the completed-only ones
    (``completed_mean_e2el_ms``, ...) and ``cut_off`` (requests the episode's time limit ended)."""
    lat = request_latencies(reqs, drops, end)
    done = lat["completed"]
    arrivals = np.array([r.arrival for r in reqs], float)
    out: dict[str, Any] = {
        "makespan_s": float((arrivals + lat["e2e"]).max() - arrivals.min()) if len(reqs) else None,
        "router_wait_s": float(lat["wait"].mean()) if len(reqs) else None,
    }
    out.update(_describe(lat["e2e"], "e2el"))
    out.update(_describe(lat["ttft"], "ttft"))
    out.update(_describe(lat["e2e"][done], "e2el", "completed_"))
    out.update(_describe(lat["ttft"][done], "ttft", "completed_"))
    out["cut_off"] = int(lat["cut_off"].sum())
    return out


def best_effort_utility(reqs: Sequence[Any], instance_models: Sequence[str], deadline: float,
                        task_deadlines: Mapping[str, float] | None = None, soft: bool = False,
                        soft_violation: str = "total") -> dict[str, float | None]:
    """Learned Best-Effort LLM Serving's utility: the mean over ALL requests of normalised accuracy x deadline
    weight (0 for a request dropped or never finished), and the share of all requests that met their deadline."""
    td = dict(task_deadlines or {})
    util, met = [], []
    for r in reqs:
        if r.finish < 0 or r.dropped or r.instance is None or r.instance < 0:
            util.append(0.0)
            met.append(False)
            continue
        d = td.get(r.task, deadline) if r.task is not None else deadline
        acc = float((r.quality_by_model or {}).get(instance_models[r.instance], 0.0))
        w = deadline_weight(r.finish - r.arrival, r.generated, d, soft, soft_violation)
        util.append(acc * w)
        met.append(deadline_weight(r.finish - r.arrival, r.generated, d, False) >= 1.0)
    if not util:
        return {"utility": None, "deadline_met": None}
    return {"utility": float(np.mean(util)), "deadline_met": float(np.mean(met))}


def env_utility(env: Any) -> dict[str, float | None] | None:
    """:func:`best_effort_utility` of a finished episode whose reward is the best-effort one (BestEffort), else None."""
    rw = env.reward_fn
    if not isinstance(rw, BestEffortReward):
        return None
    return best_effort_utility(env.episode_requests, env.instance_models, rw.deadline, rw.task_deadlines, rw.soft,
                               rw.soft_violation)


def env_latency_stats(env: Any) -> dict[str, Any]:
    """:func:`latency_stats` of a finished env episode (its requests, the driver's drop record, its clock)."""
    return latency_stats(env.episode_requests, env.driver.drops, float(env.driver.now))
