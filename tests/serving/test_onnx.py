"""Exported policies behind the live router: the same artefact that routes in the simulator routes emulated
backends (flat DDQN and SAC + HAN), and an export for other backends is refused before serving (the docs'
whole train / export / emulate / route flow: test_docs_flow.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")
pytest.importorskip("torch", reason="building an export needs the rl extra")

import httpx  # noqa: E402

from llmsim.agents.export import export  # noqa: E402
from llmsim.agents.imitate import EXPERTS, demo_checkpoint  # noqa: E402
from llmsim.emulator import start_emulator  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.serving.runner import start_router  # noqa: E402
from tests.serving.helpers import burst, router_cfg, samples  # noqa: E402

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]  # building the demo exports takes a while


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    return {k: export(demo_checkpoint(k, root), check_steps=0) for k in ("ddqn_flat", "sac_han")}


@pytest.mark.parametrize("kind,models", [("ddqn_flat", ["llama-2-7b"] * 4), ("sac_han", EXPERTS)])
def test_an_exported_policy_routes_live_traffic(exports, kind, models) -> None:
    hs = [start_emulator("llama-3.1-8b", "a100-80gb", speedup=50.0, max_num_seqs=16, seed=i)
          for i in range(len(models))]
    try:
        cfg = router_cfg([h.url for h in hs], {"onnx": str(exports[kind])})
        for b, m in zip(cfg["backends"], models):  # the llmsim names the policy was trained on
            b.update(policy_model=m, max_num_seqs=16)
        with start_router(cfg) as r:
            results = asyncio.run(burst(r.url, 60, gap=0.003))
            served = [x for x in results if x["status"] == 200]
            assert all(x["error"] is None and x["tokens"] == x["asked"] for x in served)
            # the QoS-aware edge router's policy may drop (its action space has drop): a clear 503, never a lost request
            dropped = [x for x in results if x["status"] != 200]
            assert all(x["status"] == 503 and "drop" in x["error"]["message"] for x in dropped), dropped[:2]
            assert len(served) >= 30 and (kind == "sac_han" or not dropped)
            text = httpx.get(r.url + "/metrics").text
            split = samples(text, "llmsim_router_decisions_total")
            assert sum(split.values()) == len(served) and sum(v > 0 for v in split.values()) >= 2, split  # JSQ clone
            assert sum(samples(text, "llmsim_router_decision_latency_seconds_count").values()) == 60
            assert sum(samples(text, "llmsim_router_requests_total").values()) == 60
            assert samples(text, "llmsim_router_policy_fallbacks_total")[()] == 0
    finally:
        for h in hs:
            h.stop()


HINTS = {"llmsim": {"quality_by_model": {m: 0.2 + 0.2 * k for k, m in enumerate(EXPERTS[:3])}}}


@pytest.mark.parametrize("name,models,extra", [("workload_router", ["llama-2-7b"] * 2, None),
                                               ("workload_router", ["llama-2-7b"] * 6, None),
                                               ("qos_edge", EXPERTS[:3], None), ("qos_edge", EXPERTS[:3], HINTS)])
def test_a_slot_export_routes_any_number_of_live_backends(name, models, extra, caplog) -> None:
    """The shipped WorkloadRouter export (16 instance slots) in front of 2 and 6 backends, the QoSEdge one (10
    expert slots) in front of 3, none of which they were exported for: every request served (QoSEdge may drop,
    with a clear 503), spread over more than one backend. The QoSEdge router's light-load rule needs each
    request's per-model quality: without the client's routing hints those decisions fall back (counted), with
    them none does."""
    hs = [start_emulator("llama-3.1-8b", "a100-80gb", speedup=50.0, max_num_seqs=16, seed=i)
          for i in range(len(models))]
    try:
        cfg = router_cfg([h.url for h in hs], {"onnx": f"zoo:{name}"})
        for b, m in zip(cfg["backends"], models):
            b.update(policy_model=m, max_num_seqs=16)
        with start_router(cfg) as r:
            # a quarter of the requests ask for 400 tokens: the WorkloadRouter's split sends them to its heavy half
            # (on 2 backends it spills nothing: each half is one backend, and the short requests all go to b0)
            results = asyncio.run(burst(r.url, 40, gap=0.003, extra=extra,
                                        long_every=4 if name == "workload_router" else 0))
            served = [x for x in results if x["status"] == 200]
            assert all(x["error"] is None for x in served) and len(served) >= (40 if name == "workload_router" else 10)
            # (a burst of 40 on 3 experts fills their queues of 10: the QoSEdge policy drops some, each a clear 503)
            assert all(x["status"] == 503 and "drop" in x["error"]["message"] for x in results if x["status"] != 200)
            text = httpx.get(r.url + "/metrics").text
            split = samples(text, "llmsim_router_decisions_total")
            assert sum(split.values()) == len(served) and sum(v > 0 for v in split.values()) >= 2, split
            # the QoSEdge gate's heuristic needs per-model qualities, which live requests do not carry: its
            # decisions go to the least loaded backend, counted (never an HTTP 500)
            errors = samples(text, "llmsim_router_policy_errors_total")[()]
            assert (errors > 0) == (name == "qos_edge" and extra is None), errors
        logged = [r for r in caplog.records if "the routing policy failed" in r.getMessage()]
        assert len(logged) == (1 if errors > 1 else int(errors)), "one line for the same failure of many requests"
        unknown = [r for r in caplog.records if "requests come without it" in r.getMessage()]
        assert len(unknown) == (name == "qos_edge" and extra is None), "the QoSEdge policy reads quality: said once"
    finally:
        for h in hs:
            h.stop()


def test_an_export_for_other_backends_is_refused_naming_both(exports, tmp_path) -> None:
    hs = [start_emulator("llama-3.1-8b", "a100-80gb", speedup=50.0) for _ in range(2)]
    try:
        cfg = tmp_path / "router.yaml"
        cfg.write_text("backends:\n" + "".join(f"  - {{name: g{i}, url: '{h.url}', policy_model: llama-2-7b}}\n"
                                               for i, h in enumerate(hs))
                       + f"policy: {{onnx: '{exports['ddqn_flat']}'}}\n")
        p = subprocess.run([sys.executable, "-m", "llmsim.serving.cli", "--config", str(cfg), "--port", "0"],
                           capture_output=True, text=True, timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, p.stderr
        assert "4 instances" in lines[0] and "2 instances" in lines[0], lines[0]
    finally:
        for h in hs:
            h.stop()


def test_start_router_raises_why_the_policy_refused_its_backends() -> None:
    """In-process (tests, notebooks) the refusal is the exception raised, not a "did not start" hiding it."""
    cfg = {"backends": [{"name": f"g{i}", "url": f"http://127.0.0.1:{9 + i}", "model": "opt-13b"} for i in range(2)],
           "policy": {"onnx": "zoo:workload_router"}, "port": 0}
    with pytest.raises(ConfigError, match="policy.onnx: .*opt-13b"):
        start_router(cfg)
