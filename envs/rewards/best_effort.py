"""Best-effort reward of "Learned Best-Effort LLM Serving" (Eq. 1): normalised accuracy x deadline weight.

Deadline semantics (the paper is silent; our reading): a request meets its deadline when its
mean latency per output token, (finish - arrival) / output tokens, is <= the task's deadline (40 ms).
Soft deadlines (Sec. 3.1): w = 1 - 0.01 * v for a violation of v milliseconds, 0 past 10 % of the
deadline. ``soft_violation="total"`` (default) measures v on the whole request (e2e - D * tokens, cut-off
10 % of D * tokens); ``"per_token"`` measures it per token (a 4 ms band at 40 ms, the literal reading).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.envs.options import positive
from llmsim.envs.rewards.base import Reward

if TYPE_CHECKING:
    from llmsim.request import Request


def deadline_weight(e2e_s: float, tokens: int, deadline: float, soft: bool,
                    soft_violation: str = "total") -> float:
    """w in [0, 1] for a request of ``tokens`` output tokens that took ``e2e_s`` seconds."""
    n = max(tokens, 1)
    if e2e_s / n <= deadline:
        return 1.0
    if not soft:
        return 0.0
    if soft_violation == "per_token":
        v_ms = (e2e_s / n - deadline) * 1e3
        cut_ms = 0.1 * deadline * 1e3
    else:
        v_ms = (e2e_s - deadline * n) * 1e3
        cut_ms = 0.1 * deadline * n * 1e3
    if v_ms > cut_ms:
        return 0.0
    return max(0.0, 1.0 - 0.01 * v_ms)


class BestEffortReward(Reward):
    """Sum over requests completed since the last step of A[task, model] * w, plus the generic outcome terms
    (a dropped request earns no utility and costs ``dropped``)."""

    name = "best_effort"
    own_components = ("utility", "accuracy", "deadline_met", "deadline_missed")
    default_weights = {"utility": 1.0}

    def __init__(self, deadline: float = 0.04, task_deadlines: dict[str, float] | None = None,
                 soft: bool = False, soft_violation: str = "total",
                 weights: dict[str, float] | None = None, scale: float | None = None, wait_cost: float = 0.1) -> None:
        super().__init__(weights, scale, wait_cost)
        if soft_violation not in ("total", "per_token"):
            raise ValueError(f"soft_violation must be 'total' or 'per_token', got {soft_violation!r}")
        self.deadline = float(positive("reward.deadline", deadline))
        self.task_deadlines = {t: positive(f"reward.task_deadlines.{t}", d) for t, d in (task_deadlines or {}).items()}
        self.soft = soft
        self.soft_violation = soft_violation

    def on_finish(self, req: Request, k: int) -> None:
        super().on_finish(req, k)
        q = req.quality_by_model
        acc = q.get(self.env.instance_models[k], 0.0) if q else 0.0
        d = self.task_deadlines.get(req.task, self.deadline) if req.task is not None else self.deadline
        w = deadline_weight(req.finish - req.arrival, req.generated, d, self.soft, self.soft_violation)
        self.credit(req, "utility", acc * w)
        self.credit(req, "accuracy", acc)
        self.credit(req, "deadline_met" if w >= 1.0 else "deadline_missed", 1.0)
