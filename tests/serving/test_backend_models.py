"""What the live router's model-aware policies (qlm, shepherd, routebalance) price each backend as: the backend's
model name looked up in llmsim's registry, or what its config says it serves (``llmsim_model``,
``kv_cache_dtype``), carried to the policies in ``InstanceState.model_spec`` as the simulator carries it."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

from llmsim.request import Request  # noqa: E402
from llmsim.serving.config import parse_config  # noqa: E402
from llmsim.serving.gateway import Gateway  # noqa: E402

pytestmark = pytest.mark.timeout(60)

TOO_LONG = "m" * 300  # over the file system's 255-byte file name limit


def config(*backends: dict, policy: str = "qlm") -> dict:
    return {"backends": [{"name": f"b{i}", "url": f"http://127.0.0.1:{9001 + i}", "gpu": "a100-80gb", **b}
                         for i, b in enumerate(backends)], "policy": {"heuristic": policy}}


def gateway(cfg: dict, models: list[str]) -> Gateway:
    """A gateway whose backends are up and serve ``models`` (as discovery would leave them), without a network."""
    gw = Gateway(parse_config(cfg))
    for b, m in zip(gw.backends, models, strict=True):
        b.model, b.up = m, True
    return gw


@pytest.mark.parametrize("policy", ["qlm", "shepherd"])
def test_a_backend_model_name_no_file_system_takes_is_a_counted_policy_error_not_a_500(policy) -> None:
    """A backend may call its model anything (vLLM: the path it loaded); a name the registry lookup cannot even
    probe as a path (over NAME_MAX) fell out of the policy as an OSError: every request an HTTP 500."""
    gw = gateway(config({}, {}, policy=policy), [TOO_LONG, TOO_LONG])
    assert gw.decide(Request(0, 0.0, 100, 10), [0, 1], held=False) in (0, 1)
    assert gw.metrics.registry.get_sample_value("llmsim_router_policy_errors_total") == 1
