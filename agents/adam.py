"""Adam's step for a small network without ``torch.optim``'s per-call machinery, with the same numbers.

For the Intelligent Router's 27-64-64-6 Q-network ``torch.optim.Adam.step`` costs more in its wrapper (the profiler
hook, grad mode, gathering each parameter's state, grouping the tensors by device and dtype) than in the arithmetic,
and Double DQN runs it every few env steps. :func:`adam_step` hands the optimiser's own parameters, gradients and
state tensors to torch's functional ``adam`` (the arithmetic ``Adam.step`` runs, foreach kernels included), so the
weights, the moments, the step counts and ``opt.state_dict()`` are the same bit for bit. Anything but the plain
case goes through ``opt.step()``: the first step (the state is created there), several parameter groups, a
parameter without a gradient, amsgrad, weight decay, maximize, capturable, differentiable or fused Adam, a tensor
learning rate.
"""

from __future__ import annotations

import torch
from torch.optim.adam import adam

# the group settings the fast path covers (any other value: opt.step())
PLAIN = {"amsgrad": False, "weight_decay": 0, "maximize": False, "foreach": True, "capturable": False,
         "differentiable": False, "fused": None, "decoupled_weight_decay": False}


def is_plain(opt: torch.optim.Optimizer) -> bool:
    """One group of plain foreach Adam with a float learning rate."""
    if type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1:
        return False
    group = opt.param_groups[0]
    return all(group.get(k, v) == v for k, v in PLAIN.items()) and isinstance(group["lr"], float)


def adam_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()`` for a plain Adam (see the module docstring), through torch's functional ``adam``."""
    if not is_plain(opt):
        opt.step()
        return
    group = opt.param_groups[0]
    params = group["params"]
    state = opt.state
    grads, exp_avgs, exp_avg_sqs, steps = [], [], [], []
    for p in params:
        s = state.get(p)
        if p.grad is None or not s or p.grad.is_sparse or p.is_complex():
            opt.step()
            return
        grads.append(p.grad)
        exp_avgs.append(s["exp_avg"])
        exp_avg_sqs.append(s["exp_avg_sq"])
        steps.append(s["step"])
    beta1, beta2 = group["betas"]
    with torch.no_grad():
        adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=True, capturable=False, differentiable=False,
             fused=None, grad_scale=None, found_inf=None, has_complex=False, decoupled_weight_decay=False,
             amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=0.0, eps=group["eps"],
             maximize=False)
