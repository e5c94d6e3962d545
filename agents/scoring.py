"""What "best" means during training: the greedy policy's evaluation on ``trainer.eval_seeds`` and its score.

``trainer.eval_metric`` picks the score: ``return`` (the env's reward summed over an episode), or a summary
metric. Latency metrics (``*_ms``, ``duration``) cover completed requests only, so a policy that lets requests be
dropped or cut off would look fast; their score is ``-value - LOST_REQUEST_MS x lost requests``: every lost
request ranks a policy below any that loses fewer (lexicographic order). That is why a score can read -3.55e+11:
355 requests lost per episode. :func:`explain_score` says so beside the number.
"""

from __future__ import annotations

import difflib
from numbers import Number
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.agents.checkpoint import QPolicy
from llmsim.agents.policy import run_episode
from llmsim.envs.qos_metrics import env_qos
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError

LOST_REQUEST_MS = 1e9  # a dropped request outweighs any latency difference in the evaluation score
SUMMARY_KEYS = ("mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "completed", "dropped", "duration", "avg_qos",
                "latency_per_token_ms", "within_l")


def evaluate_greedy(policy: QPolicy, env: RoutingEnv, seeds: list[int], metric: str) -> dict[str, float]:
    """Mean return and summary metrics of the greedy policy over the evaluation workloads; ``score`` is
    ``metric`` oriented so that higher is better."""
    rows = []
    for s in seeds:
        r = run_episode(policy, env, seed=s, workload_seed=s)
        qos = env_qos(env)  # the QoS-aware edge router's average QoS, latency per token, share within L
        if qos is not None:
            r["summary"] = {**r["summary"], **qos}
        rows.append(r)
    out = {"return": float(np.mean([r["return"] for r in rows]))}
    for k in SUMMARY_KEYS:
        vals = [r["summary"].get(k) for r in rows]
        if all(v is not None for v in vals):
            out[k] = float(np.mean(vals))
    if metric == "return":
        out["score"] = out["return"]
    else:
        vals = [r["summary"].get(metric) for r in rows]
        if any(v is None for v in vals):
            raise ConfigError(f"trainer.eval_metric={metric!r} is not in the run summary (try return or mean_e2el_ms)")
        out[metric] = float(np.mean(vals))
        out["score"] = eval_score(metric, out[metric], out.get("dropped", 0.0))
    return out


def check_metric(metric: str, env: RoutingEnv) -> None:
    """Refuse an ``eval_metric`` that no evaluation can score before training, not at the first evaluation: it is
    ``return`` or a number of the run summary (with the QoS metrics on a QoSEdge env). ``env`` is reset: pass one
    that nothing else uses."""
    if metric == "return":
        return
    env.reset(seed=0)
    summary = {**env.summary(), **(env_qos(env) or {})}
    names = sorted(k for k, v in summary.items() if v is None or (isinstance(v, Number) and not isinstance(v, bool)))
    if metric in names:
        return
    hint = difflib.get_close_matches(metric, names, n=1)
    examples = ["return", *[k for k in SUMMARY_KEYS if k in names]]
    raise ConfigError(f"trainer.eval_metric={metric!r}: not return or a metric of the run summary"
                      f"{f' (did you mean {hint[0]!r}?)' if hint else ''}; e.g. {', '.join(examples)}")


def lower_is_better(metric: str) -> bool:
    return metric.endswith("_ms") or metric == "duration"


def eval_score(metric: str, value: float, dropped: float) -> float:
    """Higher is better; a latency metric is negated and charged LOST_REQUEST_MS per lost request."""
    if lower_is_better(metric):
        return -value - LOST_REQUEST_MS * dropped
    return value


def explain_score(metric: str, evaluation: dict[str, Any], reward: str | None) -> str:
    """What an evaluation's score is made of, in one phrase (printed beside it: a score of -3.55e+11 is not a
    latency, it is 355 lost requests)."""
    lost = evaluation.get("dropped")
    lost_note = f", {lost:g} requests lost per episode" if lost else ""
    if metric == "return":
        what = f"the env reward {reward!r}" if reward else "the env's default reward"
        return (f"score = the greedy policy's mean episode return, {what} summed over an episode (higher is "
                f"better{lost_note})")
    if lower_is_better(metric):
        value = evaluation.get(metric, float("nan"))
        if not lost:
            return f"score = -{metric} = -{value:,.1f}; higher is better, no request lost"
        return (f"score = -{metric} - {LOST_REQUEST_MS:.0e} x lost requests = -{value:,.1f} - {LOST_REQUEST_MS:.0e} "
                f"x {lost:g}: every lost request costs {LOST_REQUEST_MS:.0e}, so a policy that loses fewer always "
                "ranks higher")
    return f"score = {metric} (higher is better{lost_note})"


def summary_lines(meta: dict[str, Any], run_dir: Path) -> list[str]:
    """What ``llmsim-train`` prints at the end: how a stopped run goes on, the run, its best score with what the
    score is made of, where the checkpoints are."""
    best = max(meta["evaluations"], key=lambda r: r["score"]) if meta["evaluations"] else {}
    stop = meta.get("stopped")
    head = [] if not stop else [
        f"stopped at step {stop['step']} of {stop['total_steps']} (trainer.stop_at_step={stop['stop_at_step']}): "
        f"continue with trainer.resume={run_dir / 'last'} and the same overrides, without trainer.stop_at_step "
        "(or with a later one)"]
    reward = (meta.get("env") or {}).get("reward")
    kind = meta.get("reward_kind") or (reward.get("kind") if isinstance(reward, dict) else reward)
    scored = "no evaluation yet"
    if best:
        why = explain_score(meta["eval_metric"], best, str(kind) if kind else None)
        scored = f"best eval {meta['eval_metric']} score {meta['best_score']:.4g} at step {best.get('step')} ({why})"
    where = [d for d in ("best", "last", "tensorboard") if (run_dir / d).is_dir()]
    return [*head, f"trained {meta['label']}: {meta['steps']} steps, {meta['episodes']} episodes, {meta['updates']} "
            f"gradient steps, {meta['wall_s']} s", scored,
            "checkpoints: " + "  ".join(str(run_dir / d) for d in where if d != "tensorboard")
            + (f"   tensorboard --logdir {run_dir / 'tensorboard'}" if "tensorboard" in where else "")]
