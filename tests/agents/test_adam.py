"""agents/adam.py: the fast Adam step gives ``torch.optim.Adam.step``'s weights and state bit for bit, and leaves
anything but plain foreach Adam to ``opt.step()``."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.adam import adam_step, is_plain  # noqa: E402
from llmsim.agents.nets import QNetwork  # noqa: E402


def _pair(**kwargs: object) -> tuple[list, torch.optim.Adam, list, torch.optim.Adam]:
    torch.manual_seed(0)
    net = QNetwork(27, 6, [64, 64])
    other = copy.deepcopy(net)
    a, b = list(net.parameters()), list(other.parameters())
    return a, torch.optim.Adam(a, lr=1e-3, **kwargs), b, torch.optim.Adam(b, lr=1e-3, **kwargs)


def _grads(params: list, step: int) -> None:
    gen = torch.Generator().manual_seed(step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)


@pytest.mark.parametrize("kwargs", [{"foreach": True}, {"foreach": False}, {"foreach": True, "amsgrad": True},
                                    {"foreach": True, "weight_decay": 0.01}])
def test_adam_step_is_opt_step_bit_for_bit(kwargs: dict) -> None:
    ours, opt_ours, theirs, opt_theirs = _pair(**kwargs)
    for step in range(25):
        _grads(ours, step)
        _grads(theirs, step)
        adam_step(opt_ours)
        opt_theirs.step()
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert not torch.equal(ours[0], QNetwork(27, 6).net[0].weight)  # the steps moved the weights
    sa, sb = opt_ours.state_dict(), opt_theirs.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for k, st in sb["state"].items():
        assert set(sa["state"][k]) == set(st)
        assert all(torch.equal(sa["state"][k][name], v) for name, v in st.items())
    assert float(sa["state"][0]["step"]) == 25.0


def test_only_plain_foreach_adam_takes_the_fast_path() -> None:
    _, plain, _, _ = _pair(foreach=True)
    assert is_plain(plain)
    for kwargs in ({"foreach": False}, {"foreach": True, "amsgrad": True}, {"foreach": True, "weight_decay": 0.1},
                   {"foreach": True, "maximize": True}):
        assert not is_plain(_pair(**kwargs)[1])
    assert not is_plain(torch.optim.SGD(QNetwork(4, 2).parameters(), lr=0.1))


def test_a_loaded_state_continues_identically() -> None:
    """After ``load_state_dict`` (a resumed run) the fast step reads the loaded moments, not stale ones."""
    ours, opt_ours, theirs, opt_theirs = _pair(foreach=True)
    for step in range(5):
        _grads(ours, step)
        _grads(theirs, step)
        adam_step(opt_ours)
        opt_theirs.step()
    saved = copy.deepcopy(opt_theirs.state_dict())
    opt_ours.load_state_dict(saved)
    for step in range(5, 10):
        _grads(ours, step)
        _grads(theirs, step)
        adam_step(opt_ours)
        opt_theirs.step()
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
