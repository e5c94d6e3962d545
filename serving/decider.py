"""What decides: any llmsim router (``policy: {heuristic: jsq}``) or an exported policy (``policy: {onnx: dir}``),
both called as llmsim routers on a :class:`~llmsim.state.state_view.StateView` of the live ClusterState, so the live
decision runs the same code as in simulation and evaluation."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from llmsim.errors import ConfigError, LLMSimError
from llmsim.request import Request
from llmsim.routing import WAIT, make_router
from llmsim.serving.config import PolicyConfig, check_static_tpot
from llmsim.state.cluster_state import ClusterState
from llmsim.state.state_view import StateView

AFTER_RESET = object()  # a held request's backends, as the policy has not taken them since it was reset


class Decider:
    """The configured policy, built once; ``decide`` is one routing decision as in simulation.

    A policy that answers WAIT keeps the request in its own central queue until it routes it, as in simulation.
    Live, a held request may leave without the policy routing it (its client left, it waited past ``max_wait_s``,
    all its backends went down, or the router sent it elsewhere because an unpriced backend came up): the policy
    would keep it for ever, and an EDF / QLM queue would keep offering that ghost first, holding every later
    request until it timed out. ``forget`` resets the policy then; the requests still held are admitted again as
    they are decided again (at once: the gateway wakes them). A policy also takes a held request's candidates
    once, when it admits it: a backend that came up since (or went down) would never be offered it; so a held
    request decided over other healthy backends than when it was held resets the policy too. An exported (ONNX)
    policy keeps no queue and is never reset."""

    def __init__(self, cfg: PolicyConfig) -> None:
        self.cfg = cfg
        # requests the policy may hold (its last answer was WAIT, or it failed), with the backends it was offered
        self.holding: dict[int, Any] = {}  # (a frozenset of backend indices, None: all, or AFTER_RESET)
        self.holds = False  # the policy has answered WAIT: a central queue (a reset never wipes another's state)
        try:
            if cfg.heuristic is not None:
                self.router: Any = make_router(cfg.heuristic, seed=cfg.seed, **cfg.kwargs)
                self.label = cfg.heuristic
            else:
                # live inputs (max_tokens, routing hints) already are the client's predictions: no simulated error
                kwargs = {"predictor_noise": False, **cfg.kwargs}
                self.router = make_router("onnx", seed=cfg.seed, path=cfg.onnx, **kwargs)
                self.label = f"onnx:{cfg.onnx}"
        except LLMSimError as e:
            raise ConfigError(self.keyed(str(e))) from None
        except (TypeError, ValueError, AttributeError, KeyError) as e:  # an option of a shape the router trips on
            raise ConfigError(f"policy.kwargs: routing policy {cfg.heuristic or 'onnx'!r} cannot be built from "
                              f"{cfg.kwargs!r} ({type(e).__name__}: {e})") from None

    def keyed(self, message: str) -> str:
        """A policy's refusal named by the router config's key (``policy.heuristic`` / ``policy.onnx``; the
        routers' own messages say ``policy.name``, the simulator's key)."""
        key = "policy.heuristic" if self.cfg.heuristic is not None else "policy.onnx"
        if message.startswith("policy.name: "):
            return key + message[len("policy.name"):]
        return message if message.startswith("policy.") else f"{key}: {message}"

    def check_backends(self, models: list[str], unpriced: list[str] | None = None) -> None:
        """An exported policy refuses backends that are not the ones it was trained for, RouteBalance backends whose
        model has no ``static_tpot_ms`` entry (ConfigError). ``unpriced``: the models of the backends without a
        ``model_spec`` (default: all), the ones that need a table entry."""
        check_static_tpot(self.cfg, list(models if unpriced is None else unpriced))
        check = getattr(self.router, "check_backends", None)
        if check is not None:
            try:
                check(models)
            except LLMSimError as e:
                raise ConfigError(self.keyed(str(e))) from None

    def decide(self, req: Request, state: ClusterState, allowed: Collection[int] | None = None) -> int:
        """The policy's answer for ``req``: an instance index (among ``allowed``), WAIT or DROP."""
        if self.cfg.heuristic is None:
            # an exported policy keeps no queue (its WAIT leaves the request with the gateway, asked again later): a
            # reset would only wipe its memory of the requests in flight (their predictions, its guide's placements)
            return int(self.router.route(req, StateView(state, allowed)))
        pool = None if allowed is None else frozenset(allowed)
        held_on = self.holding.get(req.id, pool)
        if held_on is not AFTER_RESET and held_on != pool:  # held over other backends: the policy takes them afresh
            self.reset()
        try:
            d = int(self.router.route(req, StateView(state, allowed)))
        except Exception:
            if self.holds:
                self.holding[req.id] = pool  # (it may have queued the request before it failed)
            raise
        if d == WAIT:
            self.holds = True
            self.holding[req.id] = pool
        else:
            self.holding.pop(req.id, None)
        return d

    def forget(self, request_id: int) -> bool:
        """The router is done with this request, whichever way: if the policy may still hold it, the policy is
        reset (the class docstring says why); True then."""
        if request_id not in self.holding:
            return False
        del self.holding[request_id]
        self.reset()
        return True

    def reset(self) -> None:
        """The policy forgets every request it holds; each is admitted again, over its backends of then, at its
        next decision (one reset for all of them, not one each)."""
        self.router.reset()
        self.holding = dict.fromkeys(self.holding, AFTER_RESET)
